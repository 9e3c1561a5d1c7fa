"""The dispatcher under the timer registry: the seed's SLO without precise wake-ups, and wake-ups."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from devkit.harness.calendar import apply
from devkit.harness.timer_fakes import InMemoryTimerStore
from devkit.messages.factories import calendar_event
from streams.clock import ManualClock
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.calendar.dispatch import CalendarReminderDispatcher
from streams.slices.calendar.events import CalendarEventsApplier
from streams.timers import Mode, Schedule, TimerRegistry

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)  # a slot boundary of a 60 s interval


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = Runtime(Settings(database_url=database_url), clock=ManualClock(T0))
    yield rt
    await rt.close()


def registry_with(runtime: Runtime, dispatcher: CalendarReminderDispatcher) -> TimerRegistry:
    registry = TimerRegistry(store=InMemoryTimerStore(), clock=runtime.clock, environ={})
    registry.register(
        Schedule(
            name="calendar-dispatch",
            interval=timedelta(seconds=60),
            handler=dispatcher,
            max_duration=timedelta(seconds=30),
            mode=Mode.EVERY_INSTANCE,
        )
    )
    return registry


async def sent_at(pool: asyncpg.Pool) -> datetime | None:
    value: datetime | None = await pool.fetchval("SELECT sent_at FROM calendar.event_reminders")
    return value


async def test_due_row_is_sent_by_the_next_cycle_without_precise_wake_up(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    due = T0 + timedelta(seconds=7)
    await apply(
        CalendarEventsApplier(runtime),
        calendar_event(StartAt=due + timedelta(minutes=15), ReminderOffsetsMinutes=[15]),
    )
    registry = registry_with(runtime, CalendarReminderDispatcher(runtime))
    await registry.run_due()  # baseline at T0
    for step in range(1, 61):
        clock.set(T0 + timedelta(seconds=step))
        await registry.run_due()
        if await sent_at(pool) is not None:
            break
    sent = await sent_at(pool)
    assert sent is not None
    # Seed SLO: sent no later than DueAt + 60 s + cycle duration (here: the next slot).
    assert sent - due <= timedelta(seconds=60)
    assert sent == T0 + timedelta(seconds=60)


async def test_wake_up_at_due_time_sends_within_the_nudge(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    due = T0 + timedelta(seconds=7)
    registry: TimerRegistry | None = None

    def wake(at: datetime) -> None:
        assert registry is not None
        registry.wake("calendar-dispatch", at=at + timedelta(milliseconds=2))

    dispatcher = CalendarReminderDispatcher(runtime, on_next_due=wake)
    registry = registry_with(runtime, dispatcher)
    await registry.run_due()  # baseline at T0
    await apply(
        CalendarEventsApplier(runtime, on_due=wake),
        calendar_event(StartAt=due + timedelta(minutes=15), ReminderOffsetsMinutes=[15]),
    )
    clock.set(due + timedelta(milliseconds=2))
    await registry.run_due()
    assert await sent_at(pool) == due + timedelta(milliseconds=2)


async def test_one_registry_run_has_one_run_id(runtime: Runtime, pool: asyncpg.Pool) -> None:
    """The RunRecord, the handler's result and the correlation-id of every outbox record the
    run wrote carry the registry's one run id."""
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    for offset in (15, 16):
        await apply(
            CalendarEventsApplier(runtime),
            calendar_event(StartAt=T0 + timedelta(minutes=offset), ReminderOffsetsMinutes=[15]),
        )
    registry = registry_with(runtime, CalendarReminderDispatcher(runtime))
    clock.set(T0 + timedelta(minutes=2))
    record = await registry.run_slot("calendar-dispatch")
    assert record.result == "ok" and record.summary is not None
    assert record.summary["sent_count"] == 2
    assert record.summary["run_id"] == record.run_id
    headers = [r["headers"] for r in await pool.fetch("SELECT headers FROM ops.outbox")]
    assert [h["correlation-id"] for h in headers] == [record.run_id] * 2
