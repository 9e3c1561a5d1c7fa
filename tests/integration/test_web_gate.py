"""The web gate (streams/web/guard.py) on the worker's own web app against real PostgreSQL:
read pages behind WEB_READ_TOKEN (probes and scrapers open), Faust's built-in views gone,
reads on their own read-only pool with a server-side statement_timeout and a concurrency
limit that answers 503 at once, the action credential checked before the body is read,
slow headers and bodies cut off, failed credentials logged (never the value) and counted,
and the security headers on every answer."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer

from streams.app import create_worker
from streams.console import auth
from streams.settings import Settings
from streams.slices.context import SliceContext
from streams.web import guard

pytestmark = pytest.mark.integration

ADMIN = "admin-" + "a" * 40
READER = "reader-" + "r" * 40


@asynccontextmanager
async def served(
    database_url: str, **settings: Any
) -> AsyncIterator[tuple[TestClient, SliceContext]]:
    ctx = create_worker(Settings(database_url=database_url, worker_timer_process=False, **settings))
    client = TestClient(TestServer(ctx.app.web.web_app))
    await client.start_server()
    try:
        yield client, ctx
    finally:
        await client.close()
        await ctx.runtime.close()


def failures(ctx: SliceContext, kind: str) -> float:
    value = ctx.runtime.metrics.registry.get_sample_value(
        "reminders_web_auth_failures_total", {"kind": kind}
    )
    return value or 0.0


async def test_read_pages_need_the_read_token_and_probes_stay_open(
    database_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guard, "_logged", {})
    async with served(database_url, web_admin_token=ADMIN, web_read_token=READER) as (c, ctx):
        caplog.set_level(logging.WARNING, logger="streams.web")
        for path in ("/status?format=json", "/console/rows", "/console/dlq", "/timers"):
            r = await c.get(path)
            assert r.status == 401, path
            r = await c.get(path, headers={"Authorization": "Bearer " + "w" * 40})
            assert r.status == 401, path
        assert failures(ctx, "read") == 8
        logged = [r.getMessage() for r in caplog.records if "web_auth_failed" in r.getMessage()]
        # Each counted; one line per kind every LOG_EVERY_SECONDS (a flood is not a log flood).
        assert len(logged) == 1 and "kind=read" in logged[0]
        assert not any("w" * 40 in m or READER in m for m in logged)
        for token in (READER, ADMIN):
            r = await c.get("/console/rows", headers={"Authorization": f"Bearer {token}"})
            assert r.status == 200
        for path in (
            "/health",
            "/health/live",
            "/metrics",
            "/console/login",
            "/static/console.css",
        ):
            assert (await c.get(path)).status in (200, 503), path  # 503: /health, no Kafka here
        # A login with the read token reads, and cannot act.
        r = await c.post("/console/login", data={"token": READER}, allow_redirects=False)
        assert r.status == 303
        cookie = r.cookies[guard.READ_COOKIE].value
        assert (await c.get("/console/rows", cookies={guard.READ_COOKIE: cookie})).status == 200
        r = await c.post(
            "/console/actions/cancel",
            data={"listing": "calendar/reminders", "target": "x", "reason": "r"},
            cookies={guard.READ_COOKIE: cookie},
        )
        assert r.status == 401
        assert failures(ctx, "action") == 1
        r = await c.post("/console/login", data={"token": "n" * 40}, allow_redirects=False)
        assert r.status == 403 and failures(ctx, "login") == 1


async def test_faust_built_in_views_are_not_served(database_url: str) -> None:
    async with served(database_url) as (c, ctx):
        paths = {r.resource.canonical for r in ctx.app.web.web_app.router.routes() if r.resource}
        assert not [p for p in paths if p.startswith(("/table", "/router", "/graph", "/stats"))]
        for path in ("/table/profile-expiry-marks/x/", "/router/", "/graph/", "/stats/"):
            assert (await c.get(path)).status == 404, path


async def test_every_answer_carries_the_security_headers(database_url: str) -> None:
    async with served(database_url, web_admin_token=ADMIN, web_read_token=READER) as (c, _):
        bearer = {"Authorization": f"Bearer {READER}"}
        for path, headers in (
            ("/status", bearer),
            ("/console/rows", bearer),
            ("/console/login", {}),
            ("/console/rows", {}),  # 401
            ("/nowhere", bearer),  # 404
        ):
            r = await c.get(path, headers=headers)
            csp = r.headers["Content-Security-Policy"]
            assert "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp, path
            assert "script-src" not in csp and "default-src 'none'" in csp
            assert r.headers["X-Content-Type-Options"] == "nosniff"
            assert r.headers["Cache-Control"] == "no-store", path
        page = await (await c.get("/status", headers=bearer)).text()
        assert "<style" not in page and "<script" not in page and "style=" not in page
        assert '<link rel="stylesheet" href="/static/console.css">' in page
        css = await c.get("/static/console.css")
        assert css.content_type == "text/css" and "no-store" not in css.headers["Cache-Control"]


async def test_reads_use_their_own_read_only_pool_with_a_statement_timeout(
    database_url: str, pool: asyncpg.Pool
) -> None:
    async with served(database_url, web_read_statement_timeout_seconds=0.3) as (c, ctx):
        read = await ctx.runtime.read_pool()
        async with read.acquire() as conn:
            assert await conn.fetchval("SHOW statement_timeout") == "300ms"
            assert await conn.fetchval("SHOW default_transaction_read_only") == "on"
        # A read stuck behind a lock is cancelled by the server: 503 at the timeout, not a hang.
        async with pool.acquire() as locker, locker.transaction():
            await locker.execute("LOCK TABLE calendar.event_reminders IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            r = await c.get("/console/rows/calendar/reminders?format=json")
            took = time.monotonic() - started
        assert r.status == 503 and r.headers["Retry-After"] == "1"
        assert took < 3, took
        # The worker's pool was never used by the page.
        assert ctx.runtime._pool is None


async def test_reads_over_the_limit_get_503_at_once_and_the_worker_pool_is_untouched(
    database_url: str, pool: asyncpg.Pool
) -> None:
    async with served(
        database_url,
        web_read_concurrency=2,
        web_read_pool_size=2,
        web_read_statement_timeout_seconds=30,
    ) as (c, ctx):
        async with pool.acquire() as locker, locker.transaction():
            await locker.execute("LOCK TABLE calendar.event_reminders IN ACCESS EXCLUSIVE MODE")
            held = [
                asyncio.ensure_future(c.get("/console/rows/calendar/reminders?format=json"))
                for _ in range(2)
            ]

            async def waiting() -> int:
                return int(
                    await pool.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND application_name LIKE '%:read'"
                    )
                )

            from devkit.wait import eventually

            await eventually(waiting, timeout=10, what="two reads waiting", until=lambda n: n == 2)
            started = time.monotonic()
            extra = await c.get("/console/rows/calendar/reminders?format=json")
            assert extra.status == 503 and extra.headers["Retry-After"] == "1"
            assert time.monotonic() - started < 1
            assert ctx.runtime._pool is None  # the worker's pool: never created by a read
        assert [(await r).status for r in held] == [200, 200]
        busy = ctx.runtime.metrics.registry.get_sample_value(
            "reminders_web_requests_refused_total", {"reason": "busy"}
        )
        assert busy == 1


async def _raw(port: int, data: bytes, wait: float) -> tuple[bytes, float]:
    """Send ``data``, then read until the server closes (or ``wait`` passes); what came back,
    and when its first byte did (else when the connection closed)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    writer.write(data)
    await writer.drain()
    out, first = b"", None
    try:
        async with asyncio.timeout(wait):
            while chunk := await reader.read(65536):
                first = first or time.monotonic()
                out += chunk
    except TimeoutError:
        pass
    finally:
        writer.close()
    return out, (first or time.monotonic()) - started


async def test_the_action_credential_is_checked_before_the_body_and_slow_clients_are_cut(
    database_url: str,
) -> None:
    async with served(
        database_url,
        web_admin_token=ADMIN,
        web_header_timeout_seconds=0.5,
        web_body_timeout_seconds=0.5,
    ) as (c, ctx):
        port = c.server.port
        assert port is not None
        # No credential, a body announced and never sent: refused without waiting for it.
        head = (
            b"POST /console/actions/cancel HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 50000\r\n\r\n"
        )
        out, took = await _raw(port, head, 5)
        assert out.startswith(b"HTTP/1.1 401"), out[:40]
        assert took < 0.5, took
        # With the credential, a body that never arrives: 408 after the body timeout.
        authed = head.replace(
            b"Host: x\r\n", f"Host: x\r\nAuthorization: Bearer {ADMIN}\r\n".encode()
        )
        out, took = await _raw(port, authed + b"listing=", 5)
        assert out.startswith(b"HTTP/1.1 408"), out[:40]
        # Headers that never end: the connection is closed after the header timeout.
        out, took = await _raw(port, b"GET /status HTTP/1.1\r\nHost: x\r\nX-Slow: 1", 5)
        assert out == b"" and 0.4 < took < 3, took
        # An idle connection that sends nothing at all is closed too.
        out, took = await _raw(port, b"", 5)
        assert out == b"" and took < 3, took
        too_big = await c.post(
            "/console/actions/cancel",
            data={"reason": "x" * 70_000},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert too_big.status == 413
        assert (
            ctx.runtime.metrics.registry.get_sample_value(
                "reminders_web_requests_refused_total", {"reason": "body_timeout"}
            )
            == 1
        )
        assert auth.COOKIE  # the admin session cookie name the gate checks


async def test_a_flood_of_health_checks_is_one_ping_on_the_worker_pool(database_url: str) -> None:
    """/health stays open (probes), so it must not be a way to take the worker's connections:
    one ping in flight whatever the number of callers, its answer reused for a second."""
    async with served(database_url) as (c, ctx):
        await c.get("/health")  # the worker's pool made, its first ping done

        def statements() -> float:
            value = ctx.runtime.metrics.registry.get_sample_value("reminders_db_statements_total")
            return value or 0.0

        before = statements()
        answers = await asyncio.gather(*(c.get("/health") for _ in range(40)))
        assert {(await r.json())["postgres"] for r in answers} == {"ok"}
        assert statements() - before <= 1
        pool = await ctx.runtime.worker_pool()
        assert pool.get_size() == 1  # never more than the one connection the ping took


def test_open_reads_on_a_non_loopback_host_are_said_at_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="streams.web")
    for host, token, said in (
        ("0.0.0.0", "", True),
        ("0.0.0.0", READER, False),
        ("127.0.0.1", "", False),
    ):
        caplog.clear()
        create_worker(Settings(web_host=host, web_read_token=token, worker_timer_process=False))
        logged = any("web_reads_open" in r.getMessage() for r in caplog.records)
        assert logged == said, (host, bool(token))
