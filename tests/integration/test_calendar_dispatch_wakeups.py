"""The dispatcher under the real timer registry never wakes itself into the past: a poison
row and rows locked by another session leave the rest of the backlog to go out at a bounded
number of runs per minute; skip-locked counts the rows passed over, also in a full batch."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from db import event_reminders as reminders_repo
from db import events as events_repo
from db.queries import sql
from devkit.harness.timer_fakes import InMemoryTimerStore
from streams.clock import ManualClock
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.calendar import dispatch_waker
from streams.slices.calendar.dispatch import (
    CalendarReminderDispatcher,
    DispatchConfig,
    DispatchResult,
)
from streams.timers import Mode, Schedule, TimerRegistry
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)  # a slot boundary of a 60 s interval
BACKLOG = 30  # rows due at T0 - 5 min + i s (distinct DueAt: a known claim order)
# Simulated cost of one run on the injected clock (the model in the issue: ~1.3 ms a run).
RUN_COST = timedelta(milliseconds=50)
# Runs a minute may take: the wake at start, the two future rows, the poison retry, the
# 60 s slot, and room for the lanes' extra wake-ups. A spin makes ~1,200 (60 s / RUN_COST).
BOUND = 10


class Metered:
    """The dispatcher as the registry's handler, with every run counted and costing
    ``RUN_COST`` on the injected clock; past ``end`` a run refuses (ends a spin)."""

    def __init__(self, inner: CalendarReminderDispatcher, clock: ManualClock, end: datetime):
        self.inner, self.clock, self.end = inner, clock, end
        self.results: list[DispatchResult] = []

    async def run_once(self, ctx: RunContext) -> DispatchResult:
        if self.clock.now() >= self.end:
            raise RuntimeError("past the measured minute")
        try:
            result = await self.inner.run_once(ctx)
        finally:
            self.clock.advance(RUN_COST)
        self.results.append(result)
        return result


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = Runtime(Settings(database_url=database_url), clock=ManualClock(T0))
    yield rt
    await rt.close()


async def seed(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        await events_repo.seed(
            conn, events=BACKLOG, offsets=[0], start=T0 - timedelta(minutes=5), spread_ms=1000
        )
        # Two rows that come due during the minute: the wake-ups for them must still happen.
        for at in (T0 + timedelta(seconds=20), T0 + timedelta(seconds=40)):
            await events_repo.seed(conn, events=1, offsets=[0], start=at)


async def statuses(pool: asyncpg.Pool) -> dict[str, int]:
    rows = await pool.fetch(
        "SELECT status, count(*) AS n FROM calendar.event_reminders GROUP BY status"
    )
    return {r["status"]: r["n"] for r in rows}


async def one_minute(runtime: Runtime, config: DispatchConfig) -> Metered:
    """Run the dispatcher under the registry for one minute of the injected clock, woken
    at T0 as a started worker is, and by its own next wake-ups."""
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    registry = TimerRegistry(store=InMemoryTimerStore(), clock=clock, environ={})
    dispatcher = CalendarReminderDispatcher(runtime, config, on_next_due=dispatch_waker(registry))
    metered = Metered(dispatcher, clock, end=T0 + timedelta(seconds=61))
    registry.register(
        Schedule(
            name="calendar-dispatch",
            interval=timedelta(seconds=60),
            handler=metered,
            max_duration=timedelta(seconds=30),
            mode=Mode.EVERY_INSTANCE,
        )
    )
    await registry.run_due()  # baseline at T0
    registry.wake("calendar-dispatch")
    for second in range(0, 61):
        clock.set(max(clock.now(), T0 + timedelta(seconds=second)))
        await registry.run_due()
    return metered


async def test_a_poison_row_gets_a_retry_time_and_the_registry_does_not_spin(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    await seed(pool)
    poison = await pool.fetchval(
        "SELECT event_id FROM calendar.event_reminders ORDER BY due_at LIMIT 1 OFFSET 3"
    )
    await pool.execute(
        "UPDATE calendar.events SET time_zone = 'Mars/Olympus' WHERE event_id = $1", poison
    )
    metered = await one_minute(runtime, DispatchConfig(batch_size=10))
    runs = len(metered.results)
    print(f"poison row: {runs} dispatch runs in one minute")
    assert runs <= BOUND, f"{runs} runs in a minute"
    # The rest of the backlog and both rows due during the minute went out.
    assert await statuses(pool) == {"Sent": BACKLOG + 1, "Pending": 1}
    row = await pool.fetchrow(
        "SELECT attempts, next_attempt_at, last_error_code FROM calendar.event_reminders "
        "WHERE status = 'Pending'"
    )
    # Failed at T0, retried at T0 + 60 s (the backoff's first step, the next cycle), and
    # failed again: the next retry is two minutes on.
    assert (row["attempts"], row["last_error_code"]) == (2, "ValidationError")
    assert row["next_attempt_at"] > T0 + timedelta(seconds=60 + 119)
    assert sum(r.failed_count for r in metered.results) == 2
    registry = runtime.metrics.registry
    assert registry.get_sample_value("calendar_reminder_dispatch_backing_off") == 1
    assert registry.get_sample_value("calendar_reminder_dispatch_backlog") == 1
    assert all(r.next_due is None or r.next_due > T0 for r in metered.results)


async def test_rows_locked_by_another_session_leave_the_rest_to_go_out_without_a_spin(
    runtime: Runtime, pool: asyncpg.Pool, database_url: str
) -> None:
    await seed(pool)
    holder = await asyncpg.connect(database_url)
    try:
        tx = holder.transaction()
        await tx.start()
        # A frozen peer holds the three oldest due rows for the whole minute.
        await holder.execute(
            "SELECT 1 FROM calendar.event_reminders ORDER BY due_at LIMIT 3 FOR UPDATE"
        )
        metered = await one_minute(runtime, DispatchConfig(batch_size=10, lanes=1))
        await tx.rollback()
    finally:
        await holder.close()
    runs = len(metered.results)
    print(f"3 rows locked elsewhere: {runs} dispatch runs in one minute")
    assert runs <= BOUND, f"{runs} runs in a minute"
    assert await statuses(pool) == {"Sent": BACKLOG - 3 + 2, "Pending": 3}
    first = metered.results[0]
    assert first.skipped_locked_count == 3 and first.sent_count == BACKLOG - 3
    registry = runtime.metrics.registry
    total = registry.get_sample_value("calendar_reminder_dispatch_skip_locked_total")
    assert total == sum(r.skipped_locked_count for r in metered.results)


async def test_skip_locked_counts_the_rows_a_full_batch_passed_over(
    runtime: Runtime, pool: asyncpg.Pool, database_url: str
) -> None:
    async with pool.acquire() as conn:
        await events_repo.seed(
            conn, events=15, offsets=[0], start=T0 - timedelta(minutes=5), spread_ms=1000
        )
    holder = await asyncpg.connect(database_url)
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute(
            "SELECT 1 FROM calendar.event_reminders ORDER BY due_at LIMIT 5 FOR UPDATE"
        )
        # One claim of 10: full (10 free rows after the 5 locked ones), 5 passed over.
        async with pool.acquire() as conn, conn.transaction():
            claim = await reminders_repo.claim_due(conn, T0, 10, [])
        assert (len(claim.rows), claim.passed_over) == (10, 5)
        # A run that ends on that full batch (as one under a backlog does when its budget
        # runs out; here a stop request after the first batch).
        d = CalendarReminderDispatcher(runtime, DispatchConfig(batch_size=10, lanes=1))
        cut = await d.run_once(RunContext.at(T0, clock=d.clock, should_stop=lambda: True))
        # The next run finds only the 5 locked rows: one empty claim, passing over them.
        whole = await CalendarReminderDispatcher(
            runtime, DispatchConfig(batch_size=10, lanes=1)
        ).run_once(RunContext.at(T0, clock=runtime.clock))
        await tx.rollback()
    finally:
        await holder.close()
    assert (cut.sent_count, cut.skipped_locked_count, cut.batches) == (10, 5, 1)
    assert (whole.sent_count, whole.skipped_locked_count, whole.batches) == (0, 5, 1)
    assert (
        runtime.metrics.registry.get_sample_value("calendar_reminder_dispatch_skip_locked_total")
        == 10
    )
    assert cut.next_due == T0  # cut short with a backlog: the drain goes on
    assert whole.next_due is None  # the locked rows are left to the next regular cycle


async def test_a_lone_dispatcher_draining_a_backlog_in_two_lanes_counts_nothing_as_locked(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    """The run's other lane holds its own batch: that is not contention. (Claims running
    side by side passed over each other's batch: a batch, 100 here.)"""
    async with pool.acquire() as conn:
        await events_repo.seed(
            conn, events=2000, offsets=[0], start=T0 - timedelta(minutes=50), spread_ms=10
        )
    d = CalendarReminderDispatcher(runtime, DispatchConfig(batch_size=100, lanes=2))
    result = await d.run_once(RunContext.at(T0, clock=d.clock, budget=timedelta(minutes=5)))
    assert result.sent_count == 2000 and result.batches > 20
    assert result.skipped_locked_count == 0


def reminder_rows_read(plan: dict[str, Any]) -> int:
    """Rows the plan's scans of calendar.event_reminders returned (EXPLAIN ANALYZE JSON)."""
    found, stack = 0, [plan]
    while stack:
        node = stack.pop()
        if node.get("Relation Name") == "event_reminders" and "Scan" in node["Node Type"]:
            found += int(node["Actual Rows"]) * int(node.get("Actual Loops", 1))
        stack.extend(node.get("Plans", []))
    return found


async def test_the_claim_and_its_count_read_only_the_range_they_need(
    pool: asyncpg.Pool, database_url: str
) -> None:
    """20,000 rows not yet due, 300 due with the 50 oldest locked elsewhere: a full claim of
    100 and its skip-locked count read about the 150 rows its scan went through (twice),
    not the due backlog and never the rows not yet due."""
    async with pool.acquire() as conn:
        await events_repo.seed(conn, events=20_000, offsets=[0], start=T0 + timedelta(days=1))
        await events_repo.seed(
            conn, events=300, offsets=[0], start=T0 - timedelta(minutes=50), spread_ms=10
        )
        await events_repo.analyze(conn)
    holder = await asyncpg.connect(database_url)
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute(
            "SELECT 1 FROM calendar.event_reminders ORDER BY due_at LIMIT 50 FOR UPDATE"
        )
        async with pool.acquire() as conn, conn.transaction():
            [(raw,)] = await conn.fetch(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + sql("event_reminders_claim_due"), T0, 100, []
            )
        async with pool.acquire() as conn, conn.transaction():
            claim = await reminders_repo.claim_due(conn, T0, 100, [])
        await tx.rollback()
    finally:
        await holder.close()
    assert (len(claim.rows), claim.passed_over) == (100, 50)
    read = reminder_rows_read(json.loads(raw)[0]["Plan"])
    print(f"claim of 100 with 50 locked: {read} reminder rows read")
    # 150 by the claim, the same 150 by its count, one for the next wake-up.
    assert read <= 2 * 150 + 10, read
