"""Calendar reminders (seed 000): the worked example of a slice.

- input: pin.calendar.events.v1 → events projection + Pending reminder rows (events.py),
  with the calendar-event-cache table in front of PostgreSQL;
- timer: calendar-dispatch, every instance, 60 s + precise wake-ups at the next DueAt
  (dispatch.py): due rows → Sent + ReminderDueEvent in the outbox, or Skipped;
- metrics: the seed's calendar_reminder_dispatch_* (metrics.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from streams.contracts import CALENDAR_EVENTS
from streams.slices.calendar.dispatch import CalendarReminderDispatcher, DispatchConfig
from streams.slices.calendar.events import CalendarEventsApplier
from streams.slices.calendar.explain import explain
from streams.slices.calendar.metrics import CalendarDispatchMetrics
from streams.slices.calendar.settings import CalendarSettings
from streams.slices.context import SliceContext
from streams.timers.registry import TimerRegistry
from streams.timers.schedule import Mode, Schedule

CALENDAR_DISPATCH = "calendar-dispatch"
# Dispatch runs need DueAt < AsOf (strict), so a precise wake-up comes just after DueAt.
WAKE_NUDGE = timedelta(milliseconds=2)


def dispatch_waker(registry: TimerRegistry) -> Callable[[datetime], None]:
    """Wake the dispatcher right after ``due_at`` (sub-second lateness; the 60 s cycle
    remains the safety net). Used by the dispatcher itself and by the events agent."""

    def wake(due_at: datetime) -> None:
        registry.wake(CALENDAR_DISPATCH, at=due_at + WAKE_NUDGE)

    return wake


def install(ctx: SliceContext) -> None:
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

    cache = ctx.cache_table(
        "calendar-event-cache", help="EventId -> last applied Version and reminder fingerprint"
    )
    # Two batches in flight: event states are Version-guarded and their reminders follow
    # only the states stored, so a batch committing before an earlier one changes nothing
    # (docs/architecture.md, "Two batches in flight").
    ctx.input(
        "calendar-events",
        CALENDAR_EVENTS,
        CalendarEventsApplier(runtime, cache, waker),
        pipeline_depth=2,
    )
    # A (re)started worker catches up on due reminders now, not at the next 60 s slot.
    ctx.on_started.append(lambda: registry.wake(CALENDAR_DISPATCH))


__all__ = [
    "CALENDAR_DISPATCH",
    "CalendarDispatchMetrics",
    "CalendarEventsApplier",
    "CalendarReminderDispatcher",
    "DispatchConfig",
    "dispatch_waker",
    "explain",
    "install",
]
