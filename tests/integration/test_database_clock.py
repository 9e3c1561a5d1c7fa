"""A worker runs on PostgreSQL's time: its runtime reads the database's clock before the pool
is used, so a worker whose own clock is 10 minutes fast claims nothing early, and says so."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from db import server
from db.connector import connection
from devkit.seed import seed_reminders
from streams.clock import DatabaseClock
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.calendar.dispatch import CalendarReminderDispatcher, DispatchConfig
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

FAST = timedelta(minutes=10)


class FastClock:
    """This host's clock, ``FAST`` ahead (a worker whose NTP is broken)."""

    def now(self) -> datetime:
        return datetime.now(UTC) + FAST

    def monotonic(self) -> float:
        return time.monotonic()


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = Runtime(Settings(database_url=database_url), clock=DatabaseClock(FastClock()))
    yield rt
    await rt.close()


async def test_the_runtime_runs_on_the_database_time_and_names_the_skew(
    runtime: Runtime,
) -> None:
    assert runtime.clock_problem() is None  # nothing read yet: nothing claimed
    pool = await runtime.pool()
    async with connection(pool) as conn:
        before = await server.clock(conn)
        ours = runtime.clock.now()
        after = await server.clock(conn)
    assert before - timedelta(seconds=1) <= ours <= after + timedelta(seconds=1)
    problem = runtime.clock_problem()
    assert problem is not None and problem.startswith("clock 600.") and "ahead of" in problem
    skew = runtime.metrics.registry.get_sample_value("reminders_worker_clock_skew_seconds")
    assert skew is not None and abs(skew - FAST.total_seconds()) < 1


async def test_a_fast_worker_dispatches_only_what_is_due_in_database_time(
    database_url: str, runtime: Runtime, pool: asyncpg.Pool
) -> None:
    db_now: datetime = await pool.fetchval("SELECT now()")
    # One reminder due a minute ago, one due in five minutes (inside the worker's 10).
    await seed_reminders(database_url, events=1, offsets=[0], start=db_now - timedelta(minutes=1))
    await seed_reminders(database_url, events=1, offsets=[0], start=db_now + timedelta(minutes=5))
    dispatcher = CalendarReminderDispatcher(runtime, DispatchConfig())
    await runtime.pool()
    # As the registry runs it: as_of is the worker's clock's now.
    result = await dispatcher.run_once(RunContext.at(runtime.clock.now(), clock=runtime.clock))
    assert result.sent_count == 1
    early = await pool.fetchval(
        "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent' AND due_at > $1",
        db_now,
    )
    assert early == 0
