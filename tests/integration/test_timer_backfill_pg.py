"""``timers backfill document-expiry --from D1 --to D2`` on real PostgreSQL: each day's slot
through the path of a single ``timers run --as-of``, in order; a day already run is skipped
by the slot claim (idempotent: a second backfill runs nothing); the first failed day stops
it with exit 1 and the days after it are not run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta

import asyncpg
import pytest

from db.timers import TimerRepository
from devkit.harness.profile import Harness, person_document
from streams.clock import ManualClock
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.slice import TimerContext
from streams.timer_app import create_timers
from streams.timers import Mode, Schedule, TimerRegistry
from streams.timers.context import RunContext
from streams.timers.control import backfill, backfill_days

pytestmark = pytest.mark.integration

NOW = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)
WEEK = backfill_days(date(2026, 6, 1), date(2026, 6, 7))


@pytest.fixture
async def timers(database_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[TimerContext]:
    monkeypatch.setenv("TIMER_DOCUMENT_EXPIRY_FANOUT", "inline")
    settings = Settings(database_url=database_url, worker_timer_process=False)
    ctx = create_timers(settings, Runtime(settings, clock=ManualClock(NOW)))
    yield ctx
    await ctx.runtime.close()


async def test_a_week_with_one_day_already_run(
    timers: TimerContext, database_url: str, pool: asyncpg.Pool
) -> None:
    h = Harness(database_url)
    try:
        # Documents whose 7-day threshold falls on each day of the week.
        await h.apply(*(person_document(ExpiresAt=day + timedelta(days=7)) for day in WEEK))
    finally:
        await h.close()
    slot = datetime(2026, 6, 4, 0, 30, tzinfo=UTC)  # the cron 30 0 * * * UTC
    ran = await timers.registry.run_slot("document-expiry", slot)
    assert ran.result == "ok"
    out: list[str] = []
    assert await backfill(timers, "document-expiry", WEEK, out) == 0
    assert "2026-06-04: already claimed (it ran, or runs, elsewhere): skipped" in out
    rows = await pool.fetch(
        "SELECT slot, result FROM ops.timer_slots WHERE name = 'document-expiry' ORDER BY slot"
    )
    assert [(r["slot"].date(), r["result"]) for r in rows] == [(d, "ok") for d in WEEK]
    runs = await pool.fetch(
        "SELECT as_of_date, reminders_sent FROM profile.document_expiry_runs ORDER BY as_of_date"
    )
    assert [r["as_of_date"] for r in runs] == WEEK  # each day once, the pre-run one included
    assert sum(r["reminders_sent"] for r in runs) > 0
    # Again: every day is claimed, nothing runs.
    again: list[str] = []
    assert await backfill(timers, "document-expiry", WEEK, again) == 0
    assert all(line.endswith("skipped") for line in again) and len(again) == 7
    # The future is refused, as timers run refuses it.
    future: list[str] = []
    assert await backfill(timers, "document-expiry", [date(2026, 6, 11)], future) == 2
    assert "in the future" in future[0]


class FailsOn:
    def __init__(self, day: date) -> None:
        self.day = day
        self.days: list[date] = []

    async def run_once(self, ctx: RunContext) -> None:
        self.days.append(ctx.as_of.date())
        if ctx.as_of.date() == self.day:
            raise RuntimeError("boom")


async def test_the_first_failed_day_stops_the_backfill(pool: asyncpg.Pool) -> None:
    handler = FailsOn(date(2026, 6, 3))
    registry = TimerRegistry(store=TimerRepository(pool), clock=ManualClock(NOW), environ={})
    registry.register(
        Schedule(
            name="daily",
            cron="30 0 * * *",
            handler=handler,
            max_duration=timedelta(seconds=30),
            mode=Mode.CLUSTER_ONCE,
        )
    )
    ctx = TimerContext(runtime=None, registry=registry)  # type: ignore[arg-type]
    out: list[str] = []
    assert await backfill(ctx, "daily", WEEK, out) == 1
    assert handler.days == [date(2026, 6, 1), date(2026, 6, 2), date(2026, 6, 3)]
    assert out[-1] == "backfill stopped at 2026-06-03: its run failed; later days not run"
    assert any(line.startswith("  error: ") and "RuntimeError" in line for line in out)
