"""Console actions are idempotent by a request id that ops.console_audit enforces (unique):
the same id again returns the recorded outcome and changes nothing, from the web (forms carry
a hidden id made when the page is rendered; scripts send one) and the CLI (``--request-id``,
by default derived from the command, so running the same command again is the same
request). Real PostgreSQL, the worker's own web app, the real runner."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer

from devkit.harness.automation import T0, make_runtime, outbox, runner, setting_msg, source_msg
from devkit.harness.automation_inputs import Inputs, rows, unit_msg
from streams import cli
from streams.app import create_worker
from streams.console.forms import action_forms
from streams.console.perform import lookup, perform
from streams.runtime import Runtime
from streams.settings import Settings
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

TOKEN = "t0ken-" + "y" * 40
AHEAD = T0.date() + timedelta(days=400)


@pytest.fixture
async def client(database_url: str) -> AsyncIterator[TestClient]:
    settings = Settings(
        database_url=database_url, web_admin_token=TOKEN, worker_timer_process=False
    )
    c = TestClient(TestServer(create_worker(settings).app.web.web_app))
    await c.start_server()
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    yield rt
    await rt.close()


async def sent_immediate(pool: asyncpg.Pool, runtime: Runtime) -> int:
    """An immediate notification dispatched once by the runner: its scheduler id."""
    setting, source = uuid.uuid4(), uuid.uuid4()
    await Inputs(runtime).send(
        unit_msg(),
        setting_msg(setting, offsets_days=[7], immediate_notification=True),
        source_msg(source, attributes={"ExpiresOn": AHEAD.isoformat()}),
    )
    assert (await runner(runtime).run_once(RunContext.at(T0, clock=runtime.clock))).completed == 1
    [sid] = [r["scheduler_id"] for k, r in (await rows(pool)).items() if k.endswith("immediate")]
    return int(sid)


async def run_later(runtime: Runtime) -> int:
    """The runner once, after anything the web made due (the web uses the real clock)."""
    at = datetime.now(UTC) + timedelta(minutes=1)
    return (await runner(runtime).run_once(RunContext.at(at, clock=runtime.clock))).completed


async def post(client: TestClient, action: str, **fields: Any) -> tuple[int, dict[str, Any]]:
    r = await client.post(
        f"/console/actions/{action}",
        json=fields,
        headers={"Authorization": f"Bearer {TOKEN}", "X-Operator": "bob"},
    )
    return r.status, await r.json()


async def test_a_retried_resend_with_its_request_id_sends_nothing_more(
    client: TestClient, pool: asyncpg.Pool, runtime: Runtime
) -> None:
    sid = await sent_immediate(pool, runtime)
    form = {
        "listing": "automation/scheduler",
        "target": str(sid),
        "reason": "never got it",
        "request_id": "req-7f3a",
    }
    status, body = await post(client, "resend", **form)
    assert (status, body["outcome"]) == (200, "changed")
    assert await run_later(runtime) == 1  # the re-send: two DispatchRequested
    # The client did not see the answer and retries the same request after the runner acted.
    status, again = await post(client, "resend", **form)
    assert status == 200
    assert await run_later(runtime) == 0  # no third DispatchRequested
    assert len(await outbox(pool)) == 2
    assert (again["outcome"], again["audit_id"]) == ("changed", body["audit_id"])
    audit = await pool.fetch("SELECT action, outcome, request_id FROM ops.console_audit")
    assert [tuple(a) for a in audit] == [("resend", "changed", "req-7f3a")]


async def test_a_request_id_is_required_and_names_one_action(
    client: TestClient, pool: asyncpg.Pool, runtime: Runtime
) -> None:
    sid = await sent_immediate(pool, runtime)
    form = {"listing": "automation/scheduler", "target": str(sid), "reason": "r"}
    status, body = await post(client, "resend", **form)
    assert status == 400 and "request_id" in body["message"]
    status, _ = await post(client, "resend", **form, request_id="req-1")
    assert status == 200
    # The same id for another action or row is a client's bug: refused, nothing done.
    status, body = await post(client, "cancel", **form, request_id="req-1")
    assert status == 400 and "already used for resend" in body["message"]
    status, body = await post(client, "resend", **{**form, "target": "999"}, request_id="req-1")
    assert status == 400
    assert await pool.fetchval("SELECT count(*) FROM ops.console_audit") == 1


async def test_two_deliveries_of_one_request_at_once_act_once(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    sid = await sent_immediate(pool, runtime)
    action = lookup("automation/scheduler", "resend")
    now = datetime.now(UTC)

    async def deliver() -> Any:
        return await perform(pool, action, str(sid), "bob", "lost answer", now, request_id="dup-1")

    first, second = await asyncio.gather(deliver(), deliver())
    assert {first.replayed, second.replayed} == {False, True}
    assert first.result == second.result and first.result.outcome == "changed"
    audit = await pool.fetch("SELECT outcome, request_id FROM ops.console_audit")
    assert [tuple(a) for a in audit] == [("changed", "dup-1")]
    row = await pool.fetchrow(
        "SELECT status_id, support_action_count FROM automation.scheduler WHERE scheduler_id = $1",
        sid,
    )
    assert tuple(row) == ("Pending", 1)


async def test_the_cli_run_again_is_the_same_request(
    database_url: str,
    pool: asyncpg.Pool,
    runtime: Runtime,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("USER", "oncall")
    settings = Settings(database_url=database_url)
    sid = await sent_immediate(pool, runtime)
    argv = ["rows", "resend", "automation/scheduler", str(sid), "--reason", "ticket 77"]
    assert await asyncio.to_thread(cli.main, argv, settings=settings) == 0
    assert "re-sent" in capsys.readouterr().out
    assert await run_later(runtime) == 1
    # The operator saw a timeout and runs the command again after the runner acted.
    assert await asyncio.to_thread(cli.main, argv, settings=settings) == 0
    assert "already done" in capsys.readouterr().out
    assert await run_later(runtime) == 0
    # A deliberate second re-send is a new decision: another reason, or its own request id.
    again = [*argv[:-1], "ticket 78", "--request-id", "ops-78"]
    assert await asyncio.to_thread(cli.main, again, settings=settings) == 0
    assert await run_later(runtime) == 1
    audit = await pool.fetch(
        "SELECT reason, outcome, request_id FROM ops.console_audit ORDER BY id"
    )
    assert [(a["reason"], a["outcome"]) for a in audit] == [
        ("ticket 77", "changed"),
        ("ticket 78", "changed"),
    ]
    assert audit[0]["request_id"].startswith("cli-") and audit[1]["request_id"] == "ops-78"


def test_every_form_carries_its_own_request_id() -> None:
    row = {"scheduler_id": 7, "status_id": "Completed"}
    first, second = (action_forms("automation/scheduler", row, "tok") for _ in range(2))
    ids = [re.findall(r'name="request_id" value="([^"]+)"', html) for html in (first, second)]
    assert len(ids[0]) == 1 and ids[0] != ids[1]
