"""One time budget for a dispatch run: the schedule's max duration, honoured between batches."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import faust
import pytest

from devkit.harness.calendar import apply, make_runtime
from devkit.messages.factories import T0, calendar_event
from streams.clock import ManualClock
from streams.runtime import Runtime
from streams.slices import install_all
from streams.slices.calendar import CALENDAR_DISPATCH
from streams.slices.calendar.dispatch import CalendarReminderDispatcher, DispatchConfig
from streams.slices.calendar.events import CalendarEventsApplier
from streams.slices.context import SliceContext
from streams.timers.context import RunContext
from streams.timers.registry import TimerRegistry
from streams.timers.store import build_registry
from streams.topics import Topics

pytestmark = pytest.mark.integration

START = T0 + timedelta(hours=2)
AFTER_DUE = START


class SlowBatches(CalendarReminderDispatcher):
    """Each batch takes 0.25 s on the injected clock."""

    async def _batch(self, *args: object) -> int:
        claimed = await super()._batch(*args)  # type: ignore[arg-type]
        assert isinstance(self.clock, ManualClock)
        self.clock.advance(0.25)
        return claimed


def installed(runtime: Runtime) -> TimerRegistry:
    """The registry of a worker with the calendar slice installed (the app is never started)."""
    app = faust.App(f"budget-{id(runtime)}", broker="kafka://127.0.0.1:9", autodiscover=False)
    ctx = SliceContext(app, runtime, Topics(app, runtime.settings), build_registry(runtime))
    install_all(ctx, ["calendar"])
    return ctx.registry


@pytest.fixture
async def seeded(database_url: str) -> AsyncIterator[str]:
    applier = CalendarEventsApplier(make_runtime(database_url))
    for _ in range(10):
        await apply(applier, calendar_event(StartAt=START, ReminderOffsetsMinutes=[60]))
    await applier.runtime.close()
    yield database_url


async def test_the_dispatcher_starts_no_batch_it_could_not_finish_within_its_budget(
    seeded: str, pool: asyncpg.Pool
) -> None:
    runtime = make_runtime(seeded)
    # One lane: the injected clock advances per batch, which models batches one after the
    # other (each lane of a dispatcher applies the same rule between its own batches).
    d = SlowBatches(runtime, DispatchConfig(batch_size=2, lanes=1))
    try:
        result = await d.run_once(
            RunContext.at(AFTER_DUE, clock=d.clock, budget=timedelta(seconds=1))
        )
    finally:
        await runtime.close()
    # 0.25 s per batch in a 1 s budget with 10% kept free: after the third batch (0.75 s) a
    # fourth might end at 1.0 s, so the run stops between batches, inside the timeout.
    assert (result.batches, result.sent_count, result.budget_exhausted) == (3, 6, True)
    assert (
        await pool.fetchval(
            "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Pending'"
        )
        == 4
    )


async def test_the_schedule_setting_is_the_dispatchers_budget(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry's run context ends where the schedule's (overridden) max duration does;
    nothing patches the dispatcher after it is registered."""
    seen: list[RunContext] = []

    async def record(self: CalendarReminderDispatcher, ctx: RunContext) -> None:
        seen.append(ctx)

    monkeypatch.setattr(CalendarReminderDispatcher, "run_once", record)
    for seconds in (45, 3):
        monkeypatch.setenv("TIMER_CALENDAR_DISPATCH_MAX_DURATION_SECONDS", str(seconds))
        runtime = make_runtime(database_url)
        registry = installed(runtime)
        assert registry.get(CALENDAR_DISPATCH).max_duration == timedelta(seconds=seconds)
        record_ = await registry.run_slot(CALENDAR_DISPATCH, rerun=True)
        await runtime.close()
        ctx = seen.pop()
        assert ctx.deadline - ctx.started == seconds
        assert (ctx.run_id, ctx.kind) == (record_.run_id, "manual_rerun")
