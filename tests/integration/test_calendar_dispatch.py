"""ReminderDispatchJob on real PostgreSQL: every row of the seed's test table, plus batching."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from db import event_reminders as repo
from db.connector import DatabaseUnavailable
from devkit.harness.calendar import apply, make_runtime, outbox
from devkit.messages.factories import T0, calendar_event
from devkit.wait import eventually
from streams.contracts.calendar import CalendarEventChanged
from streams.input.applier import Origin, StateWriter, Written
from streams.slices.calendar.dispatch import CalendarReminderDispatcher, DispatchConfig
from streams.slices.calendar.events import CalendarEventsApplier, CalendarWrite
from streams.timers.context import RunContext

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


def dispatcher(
    database_url: str, batch_size: int = 200, **settings: Any
) -> CalendarReminderDispatcher:
    d = CalendarReminderDispatcher(
        make_runtime(database_url, **settings), DispatchConfig(batch_size=batch_size)
    )
    _open.append(d)
    return d


# Tests that hold a session on purpose give the product's sessions room to wait for it
# (the worker default, 5 s, is for paused workers, not for a busy test machine).
PATIENT: dict[str, Any] = {"db_lock_timeout_seconds": 60}


async def waiting_on(pool: asyncpg.Pool, table: str, query_like: str = "%") -> int:
    """How many sessions of this database wait for a lock on ``table`` (pg_locks), among
    those whose current statement matches ``query_like``."""
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE NOT l.granted AND l.relation = $1::regclass "
            "AND a.datname = current_database() AND a.query ILIKE $2",
            table,
            query_like,
        )
    )


async def wait_until_waiting(pool: asyncpg.Pool, table: str, sessions: int = 1) -> None:
    """Return once ``sessions`` sessions wait for a lock on ``table``."""

    await eventually(
        lambda: waiting_on(pool, table),
        until=lambda n: n >= sessions,
        timeout=30,
        what=f"{sessions} session(s) waiting on {table}",
    )


async def blocked_by(pool: asyncpg.Pool, pid: int, what: str) -> int:
    """The pid of the session that waits for a lock held by session ``pid``."""

    async def blocked() -> int | None:
        value: int | None = await pool.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", pid
        )
        return value

    pid_waiting = await eventually(blocked, timeout=30, what=what)
    assert pid_waiting is not None
    return pid_waiting


async def row_locked(pool: asyncpg.Pool, select: str) -> bool:
    """True if some other transaction holds a lock on the row ``select`` reads
    (``FOR UPDATE NOWAIT`` is refused)."""
    async with pool.acquire() as conn, conn.transaction():
        try:
            await conn.execute(f"{select} FOR UPDATE NOWAIT")
        except asyncpg.LockNotAvailableError:
            return True
    return False


class HeldWriter:
    """The real calendar writer, held after its statements and before its commit: an
    event change in flight, holding its event row and its reminder rows."""

    def __init__(self, inner: StateWriter[CalendarEventChanged, CalendarWrite]) -> None:
        self.inner = inner
        self.inside = asyncio.Event()
        self.release = asyncio.Event()

    def key(self, message: CalendarEventChanged) -> str:
        return self.inner.key(message)

    def fingerprint(self, message: CalendarEventChanged) -> str:
        return self.inner.fingerprint(message)

    async def write(
        self,
        conn: asyncpg.Connection,
        changed: Sequence[CalendarEventChanged],
        unchanged: Sequence[CalendarEventChanged],
        now: datetime,
        origins: Mapping[str, Origin],
    ) -> Written[CalendarWrite]:
        written = await self.inner.write(conn, changed, unchanged, now, origins)
        self.inside.set()
        await self.release.wait()
        return written


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

    async def due_state(conn: Any, as_of: datetime) -> Any:
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
