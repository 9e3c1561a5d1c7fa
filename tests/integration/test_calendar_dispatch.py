"""Calendar dispatch on real PostgreSQL: what a run sends, skips, retries, rolls back, reports."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from db import event_reminders as repo
from db.connector import Connection, DatabaseUnavailable
from devkit.harness.calendar import apply, outbox
from devkit.harness.calendar_dispatch import (
    AFTER_DUE,
    DUE,
    START,
    dispatcher,
    statuses,
)
from devkit.messages.factories import calendar_event
from streams.slices.calendar.dispatch import DispatchConfig
from streams.slices.calendar.events import CalendarEventsApplier
from streams.timers.context import RunContext

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("close_dispatchers")]


async def test_empty_batch_is_a_no_op(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    await apply(applier, calendar_event(StartAt=START, ReminderOffsetsMinutes=[60]))
    # Not yet due (DueAt < AsOf is strict): nothing to do.
    d = dispatcher(database_url)
    result = await d.run_once(RunContext.at(DUE, clock=d.clock))
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
    result = await d.run_once(RunContext.at(AFTER_DUE, clock=d.clock))
    again = await d.run_once(RunContext.at(AFTER_DUE + timedelta(minutes=5), clock=d.clock))
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
    d = dispatcher(database_url)
    result = await d.run_once(RunContext.at(AFTER_DUE, clock=d.clock))
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
        result = await d.run_once(RunContext.at(AFTER_DUE, clock=d.clock))
    assert (result.sent_count, result.failed_count) == (4, 1)
    assert await statuses(pool) == {"Sent": 4, "Pending": 1}
    assert len(await outbox(pool)) == 4
    [failed] = [r for r in caplog.records if "item_failed" in r.getMessage()]
    assert bad in failed.getMessage() and "reminder_id=" in failed.getMessage()
    # Fixed data → the next cycle picks the row up.
    await pool.execute(
        "UPDATE calendar.events SET time_zone = 'UTC' WHERE event_id = $1::uuid", bad
    )
    nxt = await d.run_once(RunContext.at(AFTER_DUE + timedelta(minutes=1), clock=d.clock))
    assert nxt.sent_count == 1 and await statuses(pool) == {"Sent": 5}


async def test_run_drains_full_batches_until_backlog_is_empty(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    for _ in range(45):
        await apply(applier, calendar_event(StartAt=START, ReminderOffsetsMinutes=[60, 61]))
    d = dispatcher(database_url, batch_size=20)
    result = await d.run_once(RunContext.at(AFTER_DUE, clock=d.clock))
    assert result.sent_count == 90 and result.backlog == 0
    # four full batches, then a short one in each lane that ran (two once one was full)
    assert result.batches == 4 + DispatchConfig().lanes
    assert len(await outbox(pool)) == 90


async def test_pending_row_of_completed_event_is_skipped_without_publishing(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    await apply(applier, calendar_event(StartAt=START, ReminderOffsetsMinutes=[60]))
    # The cascade did not run (replay/race): the event is Completed, its row still Pending.
    await pool.execute("UPDATE calendar.events SET status = 'Completed'")
    d = dispatcher(database_url)
    result = await d.run_once(RunContext.at(AFTER_DUE, clock=d.clock))
    assert (result.sent_count, result.skipped_count) == (0, 1)
    row = await pool.fetchrow("SELECT status, skip_reason, sent_at FROM calendar.event_reminders")
    assert (row["status"], row["skip_reason"], row["sent_at"]) == (
        "Skipped",
        "EventCompleted",
        None,
    )
    assert await outbox(pool) == []
    registry = d.runtime.metrics.registry
    assert (
        registry.get_sample_value("calendar_reminder_dispatch_items_total", {"result": "skipped"})
        == 1
    )
    assert (
        registry.get_sample_value("calendar_reminder_dispatch_items_total", {"result": "sent"}) == 0
    )


async def test_sent_at_is_as_of_and_lateness_is_recorded(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    await apply(applier, calendar_event(StartAt=START, ReminderOffsetsMinutes=[60]))
    d = dispatcher(database_url)
    as_of = DUE + timedelta(seconds=42)
    # The runtime's clock says T0, an hour earlier: SentAt must come from AsOf, not a clock.
    assert d.clock.now() != as_of
    await d.run_once(RunContext.at(as_of, clock=d.clock))
    assert await pool.fetchval("SELECT sent_at FROM calendar.event_reminders") == as_of
    registry = d.runtime.metrics.registry
    assert registry.get_sample_value("calendar_reminder_dispatch_lateness_seconds_sum") == 42.0
    assert (
        registry.get_sample_value("calendar_reminder_dispatch_items_total", {"result": "sent"}) == 1
    )
    assert registry.get_sample_value("calendar_reminder_dispatch_backlog") == 0


async def test_backlog_gauge_counts_due_pending_rows_left(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    for _ in range(3):
        await apply(applier, calendar_event(StartAt=START, ReminderOffsetsMinutes=[60]))
    stop = True
    d = dispatcher(database_url, batch_size=1)
    registry = d.runtime.metrics.registry

    def gauge() -> float | None:
        return registry.get_sample_value("calendar_reminder_dispatch_backlog")

    assert gauge() == 0
    # A run stopped after its first batch (a shutdown) leaves two due rows Pending.
    stopped = await d.run_once(RunContext.at(AFTER_DUE, clock=d.clock, should_stop=lambda: stop))
    assert (stopped.sent_count, stopped.batches) == (1, 1)
    assert gauge() == 2
    # Cut short with claimable rows left: the drain goes on at once (AsOf, not a past DueAt).
    assert stopped.next_due == AFTER_DUE
    stop = False
    drained = await d.run_once(RunContext.at(AFTER_DUE, clock=d.clock))
    assert drained.sent_count == 2
    assert gauge() == 0
    assert await statuses(pool) == {"Sent": 3}


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
        await d.run_once(RunContext.at(AFTER_DUE, clock=d.clock))
    assert raised.value.sqlstate == "53100"
    assert await statuses(pool) == {"Pending": 5}
    assert (
        d.runtime.metrics.registry.get_sample_value("calendar_reminder_dispatch_errors_total") == 1
    )
    await pool.execute("DROP TRIGGER tr_fail ON ops.outbox")
    result = await d.run_once(RunContext.at(AFTER_DUE + timedelta(minutes=1), clock=d.clock))
    assert result.sent_count == 5 and len(await outbox(pool)) == 5


@pytest.mark.parametrize("left_behind", ["nothing", "poison", "locked"])
async def test_the_state_after_a_run_comes_from_its_last_claim_when_that_saw_every_due_row(
    database_url: str,
    pool: asyncpg.Pool,
    applier: CalendarEventsApplier,
    monkeypatch: pytest.MonkeyPatch,
    left_behind: str,
) -> None:
    """Backlog and next wake-up after a run: a short last claim that took every due row it
    saw knows them (no backlog; the earliest DueAt not yet due), so no statement of its own
    asks; a row left Pending and due (poison, or locked elsewhere) makes the run ask. The
    wake-up is never in the past for a row the run could not take: a poison row's is its
    retry time (the backoff), a locked row's is left to the next regular cycle, so the run
    wakes at the next DueAt."""
    events = [calendar_event(StartAt=START, ReminderOffsetsMinutes=[60, 10]) for _ in range(3)]
    for e in events:
        await apply(applier, e)
    later = START - timedelta(minutes=10)  # the second reminder of each event: not yet due
    asked: list[datetime] = []
    real = repo.due_state

    async def due_state(conn: Connection, as_of: datetime) -> Any:
        asked.append(as_of)
        return await real(conn, as_of)

    monkeypatch.setattr(repo, "due_state", due_state)
    held: asyncpg.Connection | None = None
    if left_behind == "poison":
        await pool.execute(
            "UPDATE calendar.events SET time_zone = 'Mars/Olympus' WHERE event_id = $1::uuid",
            events[0]["EventId"],
        )
    elif left_behind == "locked":
        held = await pool.acquire()
        await held.execute("BEGIN")
        await held.execute(
            "SELECT 1 FROM calendar.event_reminders WHERE event_id = $1::uuid AND due_at = $2 "
            "FOR UPDATE",
            events[0]["EventId"],
            DUE,
        )
    try:
        d = dispatcher(database_url, batch_size=10)
        result = await d.run_once(RunContext.at(AFTER_DUE, clock=d.clock))
    finally:
        if held is not None:
            await held.execute("ROLLBACK")
            await pool.release(held)
    if left_behind == "nothing":
        assert (result.sent_count, result.backlog, result.next_due) == (3, 0, later)
        assert asked == []
    elif left_behind == "poison":
        retry = AFTER_DUE + DispatchConfig().poison_backoff
        assert (result.sent_count, result.backlog, result.next_due) == (2, 1, retry)
        assert asked == [AFTER_DUE]
    else:
        assert (result.sent_count, result.backlog, result.next_due) == (2, 1, later)
        assert result.skipped_locked_count == 1
        assert asked == [AFTER_DUE]
    # Either way the run's figures are what the statement says after it.
    async with pool.acquire() as conn:
        state = await real(conn, AFTER_DUE)
    assert (state.backlog, state.next_wake) == (result.backlog, result.next_due)
