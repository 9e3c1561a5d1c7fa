"""The calendar slice's timer: calendar-dispatch (due rows → Sent + ReminderDueEvent in the
outbox, or Skipped), and the waker that runs it right after a row's DueAt."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from streams.console.activity import activity_of
from streams.contracts import REMINDER_DUE
from streams.runtime import Runtime
from streams.slices.calendar.dispatch import CalendarReminderDispatcher, DispatchConfig
from streams.slices.calendar.lateness import LatenessReader, merge
from streams.slices.calendar.metrics import CalendarDispatchMetrics
from streams.slices.calendar.settings import CalendarSettings
from streams.slices.slice import TimerContext
from streams.timers.registry import TimerRegistry
from streams.timers.schedule import Mode, Schedule

CALENDAR_DISPATCH = "calendar-dispatch"
# Dispatch runs need DueAt < AsOf (strict), so a precise wake-up comes just after DueAt.
WAKE_NUDGE = timedelta(milliseconds=2)

Waker = Callable[[datetime], None]


def dispatch_waker(registry: TimerRegistry) -> Waker:
    """Wake the dispatcher right after ``due_at`` (sub-second lateness; the 60 s cycle
    remains the safety net). Used by the dispatcher itself and by the events agent."""

    def wake(due_at: datetime) -> None:
        registry.wake(CALENDAR_DISPATCH, at=due_at + WAKE_NUDGE)

    return wake


def install_timers(ctx: TimerContext) -> Waker:
    """Registers calendar-dispatch; returns the waker for the events agent."""
    registry, runtime = ctx.registry, ctx.runtime
    waker = dispatch_waker(registry)
    settings = runtime.settings.of(CalendarSettings)
    dispatcher = CalendarReminderDispatcher(
        runtime,
        DispatchConfig(
            poison_backoff=timedelta(seconds=settings.calendar_dispatch_poison_backoff_seconds),
            poison_backoff_max=timedelta(
                seconds=settings.calendar_dispatch_poison_backoff_max_seconds
            ),
        ),
        metrics=runtime.metrics.family(CalendarDispatchMetrics),
        on_next_due=waker,
    )
    # One budget: the dispatcher drains for as long as the schedule's (possibly overridden)
    # max duration allows (the run context's deadline), and stops between batches before
    # the registry would cancel it, or when the registry stops.
    registry.register(
        Schedule(
            name=CALENDAR_DISPATCH,
            interval=timedelta(seconds=60),
            handler=dispatcher,
            max_duration=timedelta(seconds=30),
            mode=Mode.EVERY_INSTANCE,
            settings_prefix="TIMER_CALENDAR_DISPATCH_",
            # A lateness target (p99 < 100 ms): runs in the worker's timer process.
            isolated=True,
        )
    )
    ctx.status("calendar", status_section(runtime))
    # A (re)started worker catches up on due reminders now, not at the next 60 s slot.
    ctx.on_started.append(lambda: registry.wake(CALENDAR_DISPATCH))
    return waker


def status_section(runtime: Runtime) -> Callable[[], Awaitable[dict[str, Any]]]:
    """The /status "calendar" section: the dispatch's gauges after its last run (reported by
    the timer process that runs it), the last hour of reminder-due records and, per minute
    of DueAt, their lateness from the ledger (streams/slices/calendar/lateness.py)."""
    activity = activity_of(runtime, REMINDER_DUE.name)
    lateness = LatenessReader(runtime)

    async def section() -> dict[str, Any]:
        value = runtime.metrics.registry.get_sample_value
        return {
            "due_backlog": value("calendar_reminder_dispatch_backlog"),
            "backing_off": value("calendar_reminder_dispatch_backing_off"),
            "oldest_due_age_seconds": value("calendar_reminder_dispatch_oldest_due_age_seconds"),
            "sent": value("calendar_reminder_dispatch_items_total", {"result": "sent"}),
            "skipped": value("calendar_reminder_dispatch_items_total", {"result": "skipped"}),
            "activity": merge(await activity(), await lateness.minutes()),
        }

    return section
