"""The console is safe by default, proven on the worker's own web app (every route its router
holds, so a new one cannot be forgotten) against real PostgreSQL: every mutating route
refuses a request without the token, with a wrong token, and a browser session's POST
without its CSRF token; actions are off without WEB_ADMIN_TOKEN; no GET route changes any
table; with the token (bearer, or session + CSRF) an action changes its row, audited with
the operator's name and never the token."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer

from streams.app import create_worker
from streams.console import auth
from streams.settings import Settings

pytestmark = pytest.mark.integration

TOKEN = "t0ken-" + "x" * 40
SAFE = {"GET", "HEAD", "OPTIONS"}


async def _pending_reminder(pool: asyncpg.Pool) -> uuid.UUID:
    event_id, reminder_id = uuid.uuid4(), uuid.uuid4()
    now = datetime.now(UTC)
    await pool.execute(
        "INSERT INTO calendar.events (event_id, tenant_id, owner_user_id, kind, start_at, "
        "time_zone, status, version, occurred_at) "
        "VALUES ($1, $2, $3, 'Appointment', $4, 'UTC', 'Planned', 1, $4)",
        event_id,
        uuid.uuid4(),
        uuid.uuid4(),
        now + timedelta(days=2),
    )
    await pool.execute(
        "INSERT INTO calendar.event_reminders (reminder_id, event_id, offset_minutes, due_at) "
        "VALUES ($1, $2, 60, $3)",
        reminder_id,
        event_id,
        now + timedelta(days=1),
    )
    return reminder_id


async def snapshot(pool: asyncpg.Pool) -> dict[str, str]:
    """Every table of the service's schemas, as a digest of its rows."""
    tables = await pool.fetch(
        "SELECT table_schema || '.' || table_name AS t FROM information_schema.tables "
        "WHERE table_schema IN ('calendar', 'automation', 'profile', 'ops') "
        "AND table_type = 'BASE TABLE' ORDER BY 1"
    )
    out = {}
    for row in tables:
        name = row["t"]
        out[name] = await pool.fetchval(
            f"SELECT coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '') FROM {name} x"
        )
    return out


async def _client(database_url: str, token: str) -> TestClient:
    settings = Settings(
        database_url=database_url, web_admin_token=token, worker_timer_process=False
    )
    ctx = create_worker(settings)
    client = TestClient(TestServer(ctx.app.web.web_app))
    await client.start_server()
    client.app_routes = [  # type: ignore[attr-defined]
        (r.method, r.resource.canonical)
        for r in ctx.app.web.web_app.router.routes()
        if r.resource is not None
    ]
    return client


@pytest.fixture
async def client(database_url: str) -> AsyncIterator[TestClient]:
    c = await _client(database_url, TOKEN)
    try:
        yield c
    finally:
        await c.close()


def _path(pattern: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: "cancel" if m.group(1) == "action" else "x", pattern)


def mutating(client: TestClient) -> list[str]:
    routes = client.app_routes  # type: ignore[attr-defined]
    return sorted({_path(p) for method, p in routes if method not in SAFE})


async def test_every_mutating_route_refuses_without_the_token(
    client: TestClient, pool: asyncpg.Pool
) -> None:
    target = await _pending_reminder(pool)
    routes = mutating(client)
    assert {
        "/console/actions/cancel",
        "/console/login",
        "/console/dlq/replay",
        "/console/actions/timers/x",
    } <= set(routes)
    form = {"listing": "calendar/reminders", "target": str(target), "reason": "r"}
    before = await snapshot(pool)
    # A session cookie made with another token, and a real session without its CSRF token.
    forged = auth.new_session("another-" + "y" * 40, "mallory", datetime.now(UTC).timestamp())
    session = auth.new_session(TOKEN, "alice", datetime.now(UTC).timestamp())
    for path in routes:
        r = await client.post(path, data=form)
        assert r.status in (401, 403), (path, "no credential", r.status)
        r = await client.post(
            path,
            data={**form, "token": "wrong" * 10},
            headers={"Authorization": "Bearer " + "wrong" * 10},
        )
        assert r.status == 403, (path, "wrong token", r.status)
        r = await client.post(path, data={**form, "csrf": "x"}, cookies={auth.COOKIE: forged})
        assert r.status in (401, 403), (path, "forged session", r.status)
        if path.startswith("/console/actions/"):
            r = await client.post(path, data=form, cookies={auth.COOKIE: session})
            assert r.status == 403, (path, "session without CSRF", r.status)
            assert "CSRF" in await r.text()
            r = await client.post(
                path,
                data={**form, "csrf": auth.csrf_token(TOKEN, forged)},
                cookies={auth.COOKIE: session},
            )
            assert r.status == 403, (path, "another session's CSRF", r.status)
    assert await snapshot(pool) == before


async def test_actions_are_off_without_a_token(database_url: str, pool: asyncpg.Pool) -> None:
    target = await _pending_reminder(pool)
    c = await _client(database_url, "")
    try:
        before = await snapshot(pool)
        for path in mutating(c):
            r = await c.post(
                path,
                data={
                    "listing": "calendar/reminders",
                    "target": str(target),
                    "reason": "r",
                    "token": "",
                },
                headers={"Authorization": "Bearer "},
            )
            assert r.status in (401, 403), path
        assert await snapshot(pool) == before
    finally:
        await c.close()


async def test_no_get_route_changes_state(client: TestClient, pool: asyncpg.Pool) -> None:
    await _pending_reminder(pool)
    before = await snapshot(pool)
    gets = sorted({_path(p) for m, p in client.app_routes if m == "GET"})  # type: ignore[attr-defined]
    assert {"/console/login", "/console/dlq", "/status"} <= set(gets)
    for path in gets:
        await client.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
    # A GET of an action route is not allowed at all.
    r = await client.get("/console/actions/cancel?listing=calendar/reminders&target=x&reason=r")
    assert r.status == 405
    assert await snapshot(pool) == before


async def test_with_the_token_an_action_changes_its_row_audited(
    client: TestClient, pool: asyncpg.Pool
) -> None:
    first, second = await _pending_reminder(pool), await _pending_reminder(pool)
    r = await client.post(
        "/console/actions/cancel",
        json={
            "listing": "calendar/reminders",
            "target": str(first),
            "reason": "dup",
            "request_id": "r-1",
        },
        headers={"Authorization": f"Bearer {TOKEN}", "X-Operator": "bob"},
    )
    body = await r.json()
    assert r.status == 200, body
    assert (body["outcome"], body["state_after"]) == ("changed", "Skipped (ManualCancel)")
    # The browser path: log in with the token, then post the form with its CSRF token.
    r = await client.post(
        "/console/login", data={"token": TOKEN, "actor": "carol"}, allow_redirects=False
    )
    assert r.status == 303
    cookie = r.cookies[auth.COOKIE]
    assert cookie["httponly"] and cookie["samesite"] == "Strict"
    session = cookie.value
    r = await client.post(
        "/console/actions/cancel",
        data={
            "listing": "calendar/reminders",
            "target": str(second),
            "reason": "customer asked",
            "csrf": auth.csrf_token(TOKEN, session),
            "request_id": "web-2",
        },
        cookies={auth.COOKIE: session},
    )
    assert r.status == 200, await r.text()
    assert "cancelled" in await r.text()
    r = await client.post(
        "/console/actions/cancel",
        json={
            "listing": "calendar/reminders",
            "target": str(second),
            "reason": "again",
            "request_id": "r-3",
        },
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert r.status == 200 and (await r.json())["outcome"] == "unchanged"
    audit = await pool.fetch("SELECT actor, reason, outcome FROM ops.console_audit ORDER BY id")
    assert [tuple(a) for a in audit] == [
        ("bob", "dup", "changed"),
        ("carol", "customer asked", "changed"),
        ("admin", "again", "unchanged"),
    ]
    dump = str([dict(a) for a in await pool.fetch("SELECT * FROM ops.console_audit")])
    assert TOKEN not in dump
