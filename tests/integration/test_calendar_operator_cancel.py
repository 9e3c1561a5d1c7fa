"""An operator's cancel of a calendar reminder is terminal until an operator reopens it.

A reminder's meaning is its identity, (EventId, OffsetMinutes, DueAt): an input that keeps
wanting that identity (a new Version with another Kind, owner or zone, a replay, the event
cancelled and planned again, rescheduled away and back) leaves the operator's cancel as it
is; a reschedule or a changed offset is another identity, a new row. The console's
``reopen`` undoes the cancel (audited, idempotent by request id); retention with the
event's Version tombstone never lets a replay make the row again. Real PostgreSQL, the
real applier (with and without its state cache), the real dispatcher, console actions
through ``perform``."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer

from db import event_reminders
from devkit.harness.calendar import apply, make_runtime, outbox, reminders
from devkit.harness.calendar_dispatch import AFTER_DUE, DUE, START, dispatcher
from devkit.messages.factories import T0, calendar_event
from devkit.wait import eventually
from streams import cli
from streams.app import create_worker
from streams.clock import SystemClock
from streams.console import auth
from streams.console.forms import action_forms
from streams.console.perform import Done, lookup, perform
from streams.maintenance import RetentionMetrics, TableRetention, TableRetentionConfig
from streams.metrics import Metrics
from streams.settings import Settings
from streams.slices.calendar.events import CalendarEventsApplier
from streams.tables.cache import KeyCache
from streams.timers.context import RunContext

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("close_dispatchers")]

LISTING = "calendar/reminders"


class DictTable(dict[str, Any]):
    """Stands in for the Faust table in-process (the cache path of the applier)."""

    name = "calendar-event-cache"


@pytest.fixture(params=["no cache", "cache"])
async def writer(request: pytest.FixtureRequest, database_url: str) -> Any:
    cache = None
    if request.param == "cache":
        cache = KeyCache(DictTable(), Metrics().agents)  # type: ignore[arg-type]
    a = CalendarEventsApplier(make_runtime(database_url), cache)
    yield a
    await a.runtime.close()


async def act(
    pool: asyncpg.Pool, name: str, reminder_id: object, request_id: str | None = None
) -> Done:
    return await perform(
        pool,
        lookup(LISTING, name),
        str(reminder_id),
        "alice",
        "ticket 42",
        T0,
        request_id=request_id or f"t-{uuid.uuid4().hex}",
    )


async def the_reminder(pool: asyncpg.Pool, event_id: str) -> asyncpg.Record:
    return await pool.fetchrow(
        "SELECT reminder_id, status, skip_reason FROM calendar.event_reminders "
        "WHERE event_id = $1::uuid AND due_at = $2",
        event_id,
        DUE,
    )


async def cancelled(applier: CalendarEventsApplier, pool: asyncpg.Pool) -> dict[str, Any]:
    """An event with one reminder (60 min before START) an operator cancelled."""
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60])
    await apply(applier, e)
    row = await the_reminder(pool, e["EventId"])
    done = await act(pool, "cancel", row["reminder_id"])
    assert done.result.outcome == "changed"
    return {**e, "_reminder_id": row["reminder_id"]}


def msg(e: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {k: v for k, v in {**e, **fields}.items() if not k.startswith("_")}


async def test_no_input_reopens_an_operators_cancel(
    writer: CalendarEventsApplier, pool: asyncpg.Pool, database_url: str
) -> None:
    e = await cancelled(writer, pool)
    later = START + timedelta(hours=1)
    history = [
        msg(e, Version=2, Kind="Appointment"),  # still wants the row: another Kind
        msg(e, Version=2, Kind="Appointment"),  # the same Version again
        msg(e),  # an old Version replayed
        msg(e, Version=3, Kind="Appointment", OwnerUserId=str(uuid.uuid4())),  # new owner
        msg(e, Version=4, Status="Cancelled"),  # the event cancelled ...
        msg(e, Version=5),  # ... and planned again, as it was
        msg(e, Version=6, StartAt=later.isoformat()),  # rescheduled away: a new row ...
        msg(e, Version=7),  # ... and back to the cancelled row's identity
        msg(e, Version=8, Kind="Call"),  # the cache's path: Versions 8 and 9 alike
        msg(e, Version=9, Kind="Call"),
    ]
    for state in history:
        await apply(writer, state)
        row = await the_reminder(pool, e["EventId"])
        assert (row["status"], row["skip_reason"]) == ("Skipped", "ManualCancel"), state
    assert await reminders(pool, e["EventId"]) == [
        (60, DUE, "Skipped", "ManualCancel"),
        (60, later - timedelta(minutes=60), "Skipped", "NoLongerScheduled"),
    ]
    d = dispatcher(database_url)
    result = await d.run_once(RunContext.at(AFTER_DUE, clock=d.clock))
    assert result.sent_count == 0 and await outbox(pool) == []
    row = await the_reminder(pool, e["EventId"])
    assert (row["status"], row["skip_reason"]) == ("Skipped", "ManualCancel")


async def test_reopen_brings_it_back_once_and_it_is_sent_once(
    applier: CalendarEventsApplier, pool: asyncpg.Pool, database_url: str
) -> None:
    e = await cancelled(applier, pool)
    rid = e["_reminder_id"]
    first = await act(pool, "reopen", rid, request_id="reopen-1")
    assert first.result.outcome == "changed" and not first.replayed
    assert first.text.startswith(f"reminder {rid} reopened: Skipped (ManualCancel) -> Pending")
    again = await act(pool, "reopen", rid, request_id="reopen-1")
    assert again.replayed and again.result.audit_id == first.result.audit_id
    # A new request on the row already reopened changes nothing either.
    assert (await act(pool, "reopen", rid)).result.outcome == "unchanged"
    audits = await pool.fetch(
        "SELECT outcome FROM ops.console_audit WHERE action = 'reopen' ORDER BY id"
    )
    assert [a["outcome"] for a in audits] == ["changed", "unchanged"]

    # Reopened, the row follows its event's inputs again: a replay leaves it Pending.
    await apply(applier, msg(e, Version=2, Kind="Appointment"))
    d = dispatcher(database_url)
    sent = await d.run_once(RunContext.at(AFTER_DUE, clock=d.clock))
    later = await d.run_once(RunContext.at(AFTER_DUE + timedelta(minutes=5), clock=d.clock))
    assert (sent.sent_count, later.sent_count) == (1, 0)
    assert [r["key"] for r in await outbox(pool)] == [e["EventId"]]
    assert (await act(pool, "reopen", rid)).result.outcome == "refused"


async def test_reopen_is_refused_for_rows_no_operator_cancelled(
    applier: CalendarEventsApplier, pool: asyncpg.Pool
) -> None:
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60])
    await apply(applier, e)
    rid = (await the_reminder(pool, e["EventId"]))["reminder_id"]
    pending = await act(pool, "reopen", rid)
    assert pending.result.outcome == "refused"
    assert "only operator-cancelled reminders can be reopened" in pending.text
    await apply(applier, msg(e, Version=2, Status="Cancelled"))
    skipped = await act(pool, "reopen", rid)
    assert skipped.result.outcome == "refused"
    assert (skipped.result.state_before, skipped.result.state_after) == (
        "Skipped (EventCancelled)",
        "Skipped (EventCancelled)",
    )
    assert (await act(pool, "reopen", uuid.uuid4())).result.outcome == "not_found"
    row = await the_reminder(pool, e["EventId"])
    assert (row["status"], row["skip_reason"]) == ("Skipped", "EventCancelled")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"Status": "Cancelled"}, "EventCancelled"),
        ({"Status": "Completed"}, "EventCompleted"),
        ({"StartAt": (START + timedelta(hours=1)).isoformat()}, "NoLongerScheduled"),
        ({"ReminderOffsetsMinutes": [15]}, "NoLongerScheduled"),
    ],
)
async def test_reopen_hands_the_row_back_to_its_event(
    applier: CalendarEventsApplier,
    pool: asyncpg.Pool,
    database_url: str,
    change: dict[str, Any],
    reason: str,
) -> None:
    """An event that no longer wants the row: reopen makes it what the event's inputs would
    have (Skipped with the event's reason), never Pending; the event wanting it again later
    makes it Pending as any Skipped row."""
    e = await cancelled(applier, pool)
    await apply(applier, msg(e, Version=2, **change))
    done = await act(pool, "reopen", e["_reminder_id"])
    assert done.result.outcome == "changed"
    assert done.result.state_after == f"Skipped ({reason})"
    d = dispatcher(database_url)
    assert (await d.run_once(RunContext.at(AFTER_DUE, clock=d.clock))).sent_count == 0
    await apply(applier, msg(e, Version=3))
    row = await the_reminder(pool, e["EventId"])
    assert (row["status"], row["skip_reason"]) == ("Pending", None)


async def test_a_replay_after_retention_makes_no_reminder_again(
    applier: CalendarEventsApplier, pool: asyncpg.Pool, database_url: str
) -> None:
    """Retention deletes the event with its rows (the operator's cancel among them) and
    keeps the event's Version tombstone: an old Version replayed makes nothing again, and a
    newer Version that happened before the deleted row's DueAt (a producer's late message)
    does not make that row again either."""
    e = await cancelled(applier, pool)
    await apply(applier, msg(e, Version=2, ReminderOffsetsMinutes=[60, 15]))
    await pool.execute(
        "UPDATE calendar.event_reminders SET status = 'Sent', sent_at = due_at "
        "WHERE event_id = $1::uuid AND status = 'Pending'",
        e["EventId"],
    )
    retention = TableRetention(
        pool,
        metrics=Metrics().family(RetentionMetrics),
        config=TableRetentionConfig(),
    )
    pruned = T0 + timedelta(days=40)
    result = await retention.run_once(RunContext.at(pruned, clock=SystemClock()))
    assert result.deleted["calendar.event_reminders"] == 2
    assert await pool.fetchval("SELECT count(*) FROM calendar.event_reminders") == 0

    late = CalendarEventsApplier(make_runtime(database_url, now=pruned))
    try:
        for old in (msg(e), msg(e, Version=2, ReminderOffsetsMinutes=[60, 15])):
            assert (await apply(late, old)).applied == 0
        assert await pool.fetchval("SELECT count(*) FROM calendar.event_reminders") == 0
        # Newer than the tombstone, but it happened before both deleted rows were due.
        newer = await apply(
            late, msg(e, Version=3, ReminderOffsetsMinutes=[60, 15], OccurredAt=T0.isoformat())
        )
        assert newer.applied == 1
        assert await pool.fetchval("SELECT count(*) FROM calendar.event_reminders") == 0
    finally:
        await late.runtime.close()


def test_the_pages_offer_reopen_only_for_an_operators_cancel() -> None:
    def offered(row: dict[str, Any]) -> list[str]:
        html = action_forms(LISTING, {"reminder_id": "r1", **row}, "tok")
        return [n for n in ("retry", "cancel", "reopen") if f'/actions/{n}"' in html]

    assert offered({"status": "Skipped", "skip_reason": "ManualCancel"}) == ["reopen"]
    assert offered({"status": "Skipped", "skip_reason": "EventCancelled"}) == []
    assert offered({"status": "Skipped", "skip_reason": "NoLongerScheduled"}) == []
    assert offered({"status": "Sent"}) == []
    assert offered({"status": "Pending", "attempts": 0}) == ["cancel"]
    assert "reopen (undo cancel)" in action_forms(
        LISTING, {"reminder_id": "r1", "status": "Skipped", "skip_reason": "ManualCancel"}, "t"
    )


TOKEN = "t0ken-" + "z" * 40


async def test_reopen_from_the_detail_page_and_the_cli(
    applier: CalendarEventsApplier,
    database_url: str,
    pool: asyncpg.Pool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings(
        database_url=database_url, web_admin_token=TOKEN, worker_timer_process=False
    )
    client = TestClient(TestServer(create_worker(settings).app.web.web_app))
    await client.start_server()
    try:
        e = await cancelled(applier, pool)
        rid = str(e["_reminder_id"])
        login = await client.post(
            "/console/login", data={"token": TOKEN, "actor": "carol"}, allow_redirects=False
        )
        session = login.cookies[auth.COOKIE].value
        page = await (
            await client.get(f"/console/rows/{LISTING}/{rid}", cookies={auth.COOKIE: session})
        ).text()
        assert 'action="/console/actions/reopen"' in page
        assert 'action="/console/actions/cancel"' not in page
        form = {"listing": LISTING, "target": rid, "reason": "asked by mistake"}
        headers = {"Authorization": f"Bearer {TOKEN}", "X-Operator": "bob"}
        answers = []
        for _ in range(2):  # a browser's retry: the same request id
            r = await client.post(
                "/console/actions/reopen", json={**form, "request_id": "web-r1"}, headers=headers
            )
            assert r.status == 200
            answers.append(await r.json())
        assert [a["outcome"] for a in answers] == ["changed", "changed"]
        assert answers[0]["audit_id"] == answers[1]["audit_id"]
        assert answers[0]["state_after"] == "Pending"
        page = await (
            await client.get(f"/console/rows/{LISTING}/{rid}", cookies={auth.COOKIE: session})
        ).text()
        assert 'action="/console/actions/reopen"' not in page
        assert 'action="/console/actions/cancel"' in page
    finally:
        await client.close()

    # The CLI: cancel again, reopen; the same command again is the same request.
    monkeypatch.setenv("USER", "oncall")
    plain = Settings(database_url=database_url)
    cancel = ["rows", "cancel", LISTING, rid, "--reason", "duplicate event"]
    assert await asyncio.to_thread(cli.main, cancel, settings=plain) == 0
    reopen = ["rows", "reopen", LISTING, rid, "--reason", "not a duplicate"]
    assert await asyncio.to_thread(cli.main, reopen, settings=plain) == 0
    assert "reopened: Skipped (ManualCancel) -> Pending" in capsys.readouterr().out
    assert await asyncio.to_thread(cli.main, reopen, settings=plain) == 0
    assert "already done" in capsys.readouterr().out
    sent = ["rows", "reopen", LISTING, str(uuid.uuid4()), "--reason", "x"]
    assert await asyncio.to_thread(cli.main, sent, settings=plain) == 1
    audit = await pool.fetch(
        "SELECT action, outcome FROM ops.console_audit WHERE target = $1 ORDER BY id", rid
    )
    assert [tuple(a) for a in audit] == [
        ("cancel", "changed"),
        ("reopen", "changed"),
        ("cancel", "changed"),
        ("reopen", "changed"),
    ]


async def test_a_change_of_the_event_racing_reopen_is_what_the_row_follows(
    applier: CalendarEventsApplier, pool: asyncpg.Pool
) -> None:
    """The reopen's transaction holds the event (FOR SHARE) when a reschedule's batch
    statement starts: the batch waits, and after the reopen commits it skips the row the
    reopen made Pending (the new state no longer wants it) instead of leaving it to be sent."""
    e = await cancelled(applier, pool)
    rid = e["_reminder_id"]
    async with pool.acquire() as conn, conn.transaction():
        out = await event_reminders.console_reopen(conn, rid, "alice", "r", T0, LISTING)
        assert out.state_after == "Pending"
        later = (START + timedelta(hours=1)).isoformat()
        moved = asyncio.create_task(apply(applier, msg(e, Version=2, StartAt=later)))
        await eventually(
            lambda: pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query ILIKE '%One batch of event states%'"
            ),
            timeout=30,
            what="the batch waiting for the event",
        )
    assert (await moved).applied == 1
    assert await reminders(pool, e["EventId"]) == [
        (60, DUE, "Skipped", "NoLongerScheduled"),
        (60, START, "Pending", None),
    ]
