"""ReminderDispatchJob on real PostgreSQL: every row of the seed's test table, plus batching."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest

from db import calendar as repo
from db.connector import DatabaseUnavailable, create_pool
from streams.contracts.calendar import CalendarEventChanged
from streams.slices.calendar.dispatch import CalendarReminderDispatcher, DispatchConfig
from streams.slices.calendar.events import CalendarEventsApplier
from tests.integration.calendar_support import apply, make_runtime, outbox
from tests.support.factories import T0, calendar_event, parsed

pytestmark = pytest.mark.integration

START = T0 + timedelta(hours=2)
DUE = START - timedelta(minutes=60)
AFTER_DUE = DUE + timedelta(seconds=30)


@pytest.fixture
async def applier(database_url: str) -> AsyncIterator[CalendarEventsApplier]:
    a = CalendarEventsApplier(make_runtime(database_url))
    yield a
    await a.runtime.close()


_open: list[CalendarReminderDispatcher] = []


@pytest.fixture(autouse=True)
async def _close_dispatchers(database_url: str) -> AsyncIterator[None]:
    # Depends on database_url so that pools close before the database is dropped.
    yield
    while _open:
        await _open.pop().runtime.close()


def dispatcher(database_url: str, batch_size: int = 200) -> CalendarReminderDispatcher:
    d = CalendarReminderDispatcher(
        make_runtime(database_url), DispatchConfig(batch_size=batch_size)
    )
    _open.append(d)
    return d


async def wait_until_blocked(pool: asyncpg.Pool, table: str, timeout: float = 10.0) -> None:
    """Return once some session waits for a lock on ``table`` (observed in pg_locks)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await pool.fetchval(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE NOT l.granted AND (l.relation = $1::regclass OR a.wait_event_type = 'Lock')",
        table,
    ):
        assert loop.time() < deadline, f"nobody blocked on {table} within {timeout}s"
        await asyncio.sleep(0.01)


async def statuses(pool: asyncpg.Pool) -> dict[str, int]:
    rows = await pool.fetch(
        "SELECT status, count(*) AS n FROM calendar.event_reminders GROUP BY status"
    )
    return {r["status"]: r["n"] for r in rows}


async def test_empty_batch_is_a_no_op(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    await apply(applier, calendar_event(StartAt=START, ReminderOffsetsMinutes=[60]))
    # Not yet due (DueAt < AsOf is strict): nothing to do.
    result = await dispatcher(database_url).run_once(DUE)
    assert (result.sent_count, result.skipped_count, result.skipped_locked_count) == (0, 0, 0)
    assert await statuses(pool) == {"Pending": 1}
    assert await outbox(pool) == []


async def test_due_reminder_of_planned_event_is_sent_once_with_one_event(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    client, appointment = str(uuid.uuid4()), str(uuid.uuid4())
    e = calendar_event(
        StartAt=START,
        ReminderOffsetsMinutes=[60],
        ClientUserId=client,
        AppointmentId=appointment,
        Kind="Appointment",
    )
    await apply(applier, e)
    d = dispatcher(database_url)
    result = await d.run_once(AFTER_DUE)
    again = await d.run_once(AFTER_DUE + timedelta(minutes=5))
    assert (result.sent_count, again.sent_count) == (1, 0)
    row = await pool.fetchrow("SELECT reminder_id, status, sent_at FROM calendar.event_reminders")
    assert row["status"] == "Sent" and row["sent_at"] == AFTER_DUE
    [record] = await outbox(pool)
    assert record["topic"] == "pin.calendar.reminder-due.v1" and record["key"] == e["EventId"]
    assert json.loads(record["payload"]) == {
        "ContractVersion": 1,
        "ReminderId": str(row["reminder_id"]),
        "EventId": e["EventId"],
        "TenantId": e["TenantId"],
        "OwnerUserId": e["OwnerUserId"],
        "ClientUserId": client,
        "Kind": "Appointment",
        "StartAt": START.isoformat(),
        "TimeZone": "Europe/Moscow",
        "OffsetMinutes": 60,
        "AppointmentId": appointment,
    }
    assert record["headers"]["correlation-id"] == result.run_id


async def test_pending_row_of_cancelled_event_is_skipped_without_publishing(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60])
    await apply(applier, e)
    # The cascade did not run (replay/race): the event is Cancelled, its row still Pending.
    await pool.execute("UPDATE calendar.events SET status = 'Cancelled'")
    result = await dispatcher(database_url).run_once(AFTER_DUE)
    assert (result.sent_count, result.skipped_count) == (0, 1)
    assert (
        await pool.fetchval("SELECT skip_reason FROM calendar.event_reminders") == "EventCancelled"
    )
    assert await outbox(pool) == []


async def test_poison_row_is_excluded_logged_and_retried_next_cycle(
    database_url: str,
    pool: asyncpg.Pool,
    applier: CalendarEventsApplier,
    caplog: pytest.LogCaptureFixture,
) -> None:
    events = [calendar_event(StartAt=START, ReminderOffsetsMinutes=[60]) for _ in range(5)]
    for e in events:
        await apply(applier, e)
    bad = events[2]["EventId"]
    # A projection row that cannot make a valid ReminderDueEvent (unknown time zone).
    await pool.execute(
        "UPDATE calendar.events SET time_zone = 'Mars/Olympus' WHERE event_id = $1::uuid", bad
    )
    d = dispatcher(database_url, batch_size=2)
    with caplog.at_level(logging.ERROR, logger="streams.slices.calendar.dispatch"):
        result = await d.run_once(AFTER_DUE)
    assert (result.sent_count, result.failed_count) == (4, 1)
    assert await statuses(pool) == {"Sent": 4, "Pending": 1}
    assert len(await outbox(pool)) == 4
    [failed] = [r for r in caplog.records if "item_failed" in r.getMessage()]
    assert bad in failed.getMessage() and "reminder_id=" in failed.getMessage()
    # Fixed data → the next cycle picks the row up.
    await pool.execute(
        "UPDATE calendar.events SET time_zone = 'UTC' WHERE event_id = $1::uuid", bad
    )
    nxt = await d.run_once(AFTER_DUE + timedelta(minutes=1))
    assert nxt.sent_count == 1 and await statuses(pool) == {"Sent": 5}


async def test_run_drains_full_batches_until_backlog_is_empty(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    for _ in range(45):
        await apply(applier, calendar_event(StartAt=START, ReminderOffsetsMinutes=[60, 61]))
    result = await dispatcher(database_url, batch_size=20).run_once(AFTER_DUE)
    assert result.sent_count == 90 and result.batches == 5 and result.backlog == 0
    assert len(await outbox(pool)) == 90


async def test_parallel_dispatchers_handle_each_row_once(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    msgs = [
        calendar_event(StartAt=START, ReminderOffsetsMinutes=[60, 61, 62, 63]) for _ in range(500)
    ]
    for i in range(0, len(msgs), 100):
        await apply(applier, *msgs[i : i + 100])
    instances = [dispatcher(database_url, batch_size=50) for _ in range(3)]
    results = await asyncio.gather(*(d.run_once(AFTER_DUE) for d in instances))
    assert sum(r.sent_count for r in results) == 2000
    ids = await pool.fetch("SELECT payload::jsonb->>'ReminderId' AS rid FROM ops.outbox")
    assert len(ids) == 2000 and len({r["rid"] for r in ids}) == 2000
    assert await statuses(pool) == {"Sent": 2000}


async def test_rows_locked_by_an_inflight_cancel_are_passed_over_then_never_sent(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60])
    await apply(applier, e)
    cancel = parsed({**e, "Version": 2, "Status": "Cancelled"})
    conn = await asyncpg.connect(database_url)
    try:
        tx = conn.transaction()
        await tx.start()
        # The agent's cancel is in flight: event row updated and reminders locked.
        await repo.events_upsert(conn, [cancel], T0)
        await repo.reminders_skip_unwanted(conn, {cancel.event_id: "EventCancelled"}, [], T0)
        d = dispatcher(database_url)
        during = await d.run_once(AFTER_DUE)
        assert (during.sent_count, during.skipped_locked_count) == (0, 1)
        await tx.commit()
    finally:
        await conn.close()
    after = await d.run_once(AFTER_DUE)
    assert after.sent_count == 0
    assert await statuses(pool) == {"Skipped": 1}
    assert await outbox(pool) == []


async def test_cancel_arriving_while_dispatcher_holds_the_row_waits_and_cannot_unsend(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60])
    await apply(applier, e)
    cancel: CalendarEventChanged = parsed({**e, "Version": 2, "Status": "Cancelled"})
    holder = await asyncpg.connect(database_url)
    canceller = await asyncpg.connect(database_url)
    try:
        # Dispatcher's claim holds the reminder; the cancel must wait for its commit.
        tx = holder.transaction()
        await tx.start()
        rows, _ = await repo.reminders_claim_due(holder, AFTER_DUE, 10, [])
        assert len(rows) == 1

        async def cancel_event() -> int:
            async with canceller.transaction():
                await repo.events_upsert(canceller, [cancel], T0)
                return await repo.reminders_skip_unwanted(
                    canceller, {cancel.event_id: "EventCancelled"}, [], T0
                )

        task = asyncio.create_task(cancel_event())
        await wait_until_blocked(pool, "calendar.event_reminders")
        assert not task.done()
        await repo.reminders_mark_dispatched(
            holder, [(rows[0].reminder_id, "Sent", None)], AFTER_DUE
        )
        await tx.commit()
        assert await task == 0  # the row was no longer Pending when the cancel got it
    finally:
        await holder.close()
        await canceller.close()
    assert await statuses(pool) == {"Sent": 1}
    assert await pool.fetchval("SELECT status FROM calendar.events") == "Cancelled"


async def test_cancelled_run_rolls_back_its_batch_whole_and_releases_locks(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    for _ in range(10):
        await apply(applier, calendar_event(StartAt=START, ReminderOffsetsMinutes=[60]))
    blocker = await asyncpg.connect(database_url)
    try:
        # Hold the outbox so the batch stops after its claim and transitions.
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("LOCK TABLE ops.outbox IN EXCLUSIVE MODE")
        d = dispatcher(database_url)
        run = asyncio.create_task(d.run_once(AFTER_DUE))
        await wait_until_blocked(pool, "ops.outbox")
        run.cancel()  # what a SIGTERM does to the run
        with pytest.raises(asyncio.CancelledError):
            await run
        await tx.rollback()
    finally:
        await blocker.close()
    assert await statuses(pool) == {"Pending": 10}
    # Locks released: another instance claims every row at once.
    other = dispatcher(database_url)
    result = await other.run_once(AFTER_DUE)
    assert result.sent_count == 10 and result.skipped_locked_count == 0


async def test_sent_at_is_as_of_and_lateness_is_recorded(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    await apply(applier, calendar_event(StartAt=START, ReminderOffsetsMinutes=[60]))
    d = dispatcher(database_url)
    await d.run_once(DUE + timedelta(seconds=42))
    registry = d.runtime.metrics.registry
    assert registry.get_sample_value("calendar_reminder_dispatch_lateness_seconds_sum") == 42.0
    assert (
        registry.get_sample_value("calendar_reminder_dispatch_items_total", {"result": "sent"}) == 1
    )
    assert registry.get_sample_value("calendar_reminder_dispatch_backlog") == 0


async def test_backlog_gauge_counts_due_pending_rows_left(
    database_url: str, applier: CalendarEventsApplier
) -> None:
    for _ in range(3):
        await apply(applier, calendar_event(StartAt=START, ReminderOffsetsMinutes=[60]))
    pool = await create_pool(database_url)
    try:
        async with pool.acquire() as conn:
            assert await repo.reminders_count_due(conn, AFTER_DUE) == 3
            assert await repo.reminders_next_due(conn) == DUE
    finally:
        await pool.close()


async def test_infrastructure_error_rolls_the_whole_batch_back_and_the_next_cycle_retries(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    for _ in range(5):
        await apply(applier, calendar_event(StartAt=START, ReminderOffsetsMinutes=[60]))
    # The outbox insert fails (as a full disk or a lost connection would) after the
    # claim and the transitions of the batch were already executed.
    await pool.execute(
        """
        CREATE FUNCTION ops.fail_insert() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN RAISE EXCEPTION 'disk full' USING ERRCODE = '53100'; END $$;
        CREATE TRIGGER tr_fail BEFORE INSERT ON ops.outbox
            FOR EACH STATEMENT EXECUTE FUNCTION ops.fail_insert();
        """
    )
    d = dispatcher(database_url)
    with pytest.raises(DatabaseUnavailable) as raised:
        await d.run_once(AFTER_DUE)
    assert raised.value.sqlstate == "53100"
    assert await statuses(pool) == {"Pending": 5}
    assert (
        d.runtime.metrics.registry.get_sample_value("calendar_reminder_dispatch_errors_total") == 1
    )
    await pool.execute("DROP TRIGGER tr_fail ON ops.outbox")
    result = await d.run_once(AFTER_DUE + timedelta(minutes=1))
    assert result.sent_count == 5 and len(await outbox(pool)) == 5
