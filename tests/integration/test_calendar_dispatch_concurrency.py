"""Calendar dispatch on real PostgreSQL beside other sessions: parallel dispatchers, cancels in
flight, a cancelled run, lanes of batches at once."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from devkit.harness.calendar import apply, make_runtime, outbox
from devkit.harness.calendar_dispatch import (
    AFTER_DUE,
    PATIENT,
    START,
    HeldWriter,
    blocked_by,
    dispatcher,
    row_locked,
    statuses,
    wait_until_waiting,
)
from devkit.messages.factories import T0, calendar_event
from streams.slices.calendar.dispatch import CalendarReminderDispatcher, DispatchConfig
from streams.slices.calendar.events import CalendarEventsApplier
from streams.timers.context import RunContext

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("close_dispatchers")]


async def test_parallel_dispatchers_handle_each_row_once(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    """Three instances started together, each holding a claimed batch at once; then they
    drain 2000 rows in batches of 50. Each row is sent once, every instance sends, and
    SKIP LOCKED is seen passing rows over.

    The skip-locked count of a claim is ``min(visible due, batch) - claimed``: rows are
    counted as passed over only when the claim comes back short of its batch while locked
    due rows exist (a full claim has simply taken the next unlocked rows). So the first
    round is arranged to end short: 120 due rows for three claims of 50, all three held in
    their transactions (the outbox table is share-locked, so each waits at its outbox
    INSERT after claiming). The last claimer finds 20 free rows of a visible 50. The other
    1880 rows arrive while the three are held, so the drain that follows has them all
    competing again."""
    offsets = [60, 61, 62, 63]
    first = [calendar_event(StartAt=START, ReminderOffsetsMinutes=offsets) for _ in range(30)]
    rest = [calendar_event(StartAt=START, ReminderOffsetsMinutes=offsets) for _ in range(470)]
    await apply(applier, *first)
    instances = [dispatcher(database_url, batch_size=50, **PATIENT) for _ in range(3)]
    blocker = await asyncpg.connect(database_url)
    try:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("LOCK TABLE ops.outbox IN SHARE MODE")
        runs = [
            asyncio.create_task(d.run_once(RunContext.at(AFTER_DUE, clock=d.clock)))
            for d in instances
        ]
        # Each instance claimed its first batch and now waits to insert its outbox rows.
        await wait_until_waiting(pool, "ops.outbox", sessions=3)
        assert await statuses(pool) == {"Pending": 120}, "nothing commits while held"
        for i in range(0, len(rest), 100):
            await apply(applier, *rest[i : i + 100])
        await tx.commit()
        results = await asyncio.gather(*runs)
    finally:
        await blocker.close()
    assert sum(r.sent_count for r in results) == 2000
    assert all(r.sent_count > 0 for r in results), [r.sent_count for r in results]
    assert sum(r.skipped_locked_count for r in results) >= 30, [
        r.skipped_locked_count for r in results
    ]
    ids = await pool.fetch("SELECT payload::jsonb->>'ReminderId' AS rid FROM ops.outbox")
    assert len(ids) == 2000 and len({r["rid"] for r in ids}) == 2000
    assert await statuses(pool) == {"Sent": 2000}
    # The Prometheus counters say the same as the run results.
    locked = [
        d.runtime.metrics.registry.get_sample_value("calendar_reminder_dispatch_skip_locked_total")
        for d in instances
    ]
    assert locked == [r.skipped_locked_count for r in results]


# Races with an event change. Seed 000, test table, row "race with event cancellation": a
# cancellation committed between the worker's read and its write is resolved by re-reading:
# a terminal row is not sent. Failure-mode row "worker <-> event cancel/reschedule race":
# rows under the event's cascade are locked, so the worker skips them this cycle; if the
# cascade committed first the row is already Skipped and not selected; if the worker was
# first the reminder goes out and the event is cancelled after it (an accepted window).
#
# In this design the worker's read IS its lock: the claim (event_reminders_claim_due) locks
# each due reminder FOR NO KEY UPDATE and its event FOR SHARE, and the batch's mark and
# outbox insert run in the same transaction. A cancellation must update that event row
# (and then the reminder rows), so it waits for the dispatcher's commit: a cancellation
# that commits *between* the claim and the mark cannot happen. The two orders that can
# happen are tested below with the real dispatcher and the real events applier:
# - the dispatcher first: the cancellation waits; the reminder stays Sent (exactly one
#   outbox row), the event ends Cancelled (the seed's accepted window: the client gets the
#   reminder and then the cancellation notice);
# - the cancellation first (in flight, holding the event and its rows): the dispatcher
#   passes them over (SKIP LOCKED, counted), and once the cancellation commits its next
#   claim re-reads the row as Skipped: the terminal row is never sent.


async def test_cancel_arriving_while_dispatcher_holds_the_row_waits_and_cannot_unsend(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60])
    await apply(applier, e)
    d = dispatcher(database_url, **PATIENT)
    holder = await asyncpg.connect(database_url)
    try:
        # SHARE on the outbox admits the claim and the mark and stops the outbox insert
        # (ROW EXCLUSIVE): the real dispatcher holds the claimed row, marked but not committed.
        tx = holder.transaction()
        await tx.start()
        await holder.execute("LOCK TABLE ops.outbox IN SHARE MODE")
        run = asyncio.create_task(d.run_once(RunContext.at(AFTER_DUE, clock=d.clock)))
        dispatcher_pid = await blocked_by(
            pool, holder.get_server_pid(), "the dispatcher waiting to write its outbox row"
        )
        assert await row_locked(pool, "SELECT 1 FROM calendar.event_reminders")
        assert await row_locked(pool, "SELECT 1 FROM calendar.events")

        # The real applier applies the Cancelled state while the dispatcher holds the row.
        cancelling = asyncio.create_task(apply(applier, {**e, "Version": 2, "Status": "Cancelled"}))
        await blocked_by(pool, dispatcher_pid, "the cancellation waiting for the dispatcher")
        # Not committed in between: the event is still Planned for everyone else.
        assert not cancelling.done() and not run.done()
        assert await pool.fetchval("SELECT status FROM calendar.events") == "Planned"
        assert await statuses(pool) == {"Pending": 1}
        await tx.commit()
        result = await run
        cancelled = await cancelling
    finally:
        await holder.close()
    assert (result.sent_count, result.skipped_count, result.skipped_locked_count) == (1, 0, 0)
    # The cancellation applied its state, but the row was no longer Pending when it got it.
    assert cancelled.applied == 1
    assert cancelled.details is not None and cancelled.details.reminders_skipped == 0
    row = await pool.fetchrow("SELECT reminder_id, status, sent_at FROM calendar.event_reminders")
    assert (row["status"], row["sent_at"]) == ("Sent", AFTER_DUE)
    [record] = await outbox(pool)
    assert json.loads(record["payload"])["ReminderId"] == str(row["reminder_id"])
    assert await pool.fetchval("SELECT status FROM calendar.events") == "Cancelled"


async def test_rows_locked_by_an_inflight_cancel_are_passed_over_then_never_sent(
    database_url: str, pool: asyncpg.Pool, applier: CalendarEventsApplier
) -> None:
    e = calendar_event(StartAt=START, ReminderOffsetsMinutes=[60])
    await apply(applier, e)
    held = HeldWriter(applier.writer)
    applier.writer = held
    cancelling = asyncio.create_task(apply(applier, {**e, "Version": 2, "Status": "Cancelled"}))
    try:
        await asyncio.wait_for(held.inside.wait(), 30)
        # The cancellation's transaction has updated the event and skipped the row; it
        # has not committed.
        assert await row_locked(pool, "SELECT 1 FROM calendar.events")
        assert await row_locked(pool, "SELECT 1 FROM calendar.event_reminders")
        d = dispatcher(database_url)
        during = await d.run_once(RunContext.at(AFTER_DUE, clock=d.clock))
        assert (during.sent_count, during.skipped_count, during.skipped_locked_count) == (
            0,
            0,
            1,
        )
        assert (
            d.runtime.metrics.registry.get_sample_value(
                "calendar_reminder_dispatch_skip_locked_total"
            )
            == 1
        )
        assert await statuses(pool) == {"Pending": 1}, "passed over, not waited for"
    finally:
        held.release.set()
        cancelled = await cancelling
    assert cancelled.details is not None and cancelled.details.reminders_skipped == 1
    after = await d.run_once(RunContext.at(AFTER_DUE, clock=d.clock))
    assert (after.sent_count, after.skipped_count, after.skipped_locked_count) == (0, 0, 0)
    assert await pool.fetchval(
        "SELECT status || '/' || skip_reason FROM calendar.event_reminders"
    ) == ("Skipped/EventCancelled")
    assert await pool.fetchval("SELECT sent_at FROM calendar.event_reminders") is None
    assert await outbox(pool) == []


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
        run = asyncio.create_task(d.run_once(RunContext.at(AFTER_DUE, clock=d.clock)))
        await wait_until_waiting(pool, "ops.outbox")
        run.cancel()  # what a SIGTERM does to the run
        with pytest.raises(asyncio.CancelledError):
            await run
        await tx.rollback()
    finally:
        await blocker.close()
    assert await statuses(pool) == {"Pending": 10}
    # Locks released: another instance claims every row at once.
    other = dispatcher(database_url)
    result = await other.run_once(RunContext.at(AFTER_DUE, clock=other.clock))
    assert result.sent_count == 10 and result.skipped_locked_count == 0


@pytest.mark.parametrize(
    ("lanes", "full_batches", "most_at_once"), [(2, 4, 2), (1, 4, 1), (2, 0, 1)]
)
async def test_a_backlog_is_drained_by_two_batches_at_once_a_small_run_by_one(
    database_url: str, lanes: int, full_batches: int, most_at_once: int
) -> None:
    """Batches after a full one run beside it (their own transactions, SKIP LOCKED keeps
    their rows apart); a run whose first batch is short stays a single batch."""
    d = CalendarReminderDispatcher(
        make_runtime(database_url),
        DispatchConfig(batch_size=10, lanes=lanes),
    )
    running = peak = calls = 0
    left = full_batches

    async def batch(pool: Any, as_of: datetime, result: Any) -> tuple[int, None]:
        nonlocal running, peak, calls, left
        calls += 1
        running += 1
        peak = max(peak, running)
        try:
            await asyncio.sleep(0)  # the other lane gets its turn here
            await asyncio.sleep(0)
            full = left > 0
            left -= 1
            return (10 if full else 3), None  # the state after the run: asked for
        finally:
            running -= 1

    d._batch = batch  # type: ignore[method-assign]
    try:
        await d.run_once(RunContext.at(T0, clock=d.clock, budget=timedelta(minutes=1)))
    finally:
        await d.runtime.close()
    assert peak == most_at_once
    # every lane that ran ends on a short batch of its own
    assert calls == full_batches + (lanes if full_batches else 1)
