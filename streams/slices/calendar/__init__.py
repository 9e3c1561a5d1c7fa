"""Calendar reminders (seed 000): the worked example of a slice.

- input: pin.calendar.events.v1 → events projection + Pending reminder rows (events.py),
  with the calendar-event-cache table in front of PostgreSQL (stream.py);
- timer: calendar-dispatch, every instance, 60 s + precise wake-ups at the next DueAt
  (timers.py, dispatch.py): due rows → Sent + ReminderDueEvent in the outbox, or Skipped;
- explain: what happened to an EventId or ReminderId (explain.py); demo workload (demo.py);
- metrics: the seed's calendar_reminder_dispatch_* (metrics.py);
- console: its reminder rows by state, for /console/rows and ``rows`` (listings.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streams.contracts import CALENDAR_EVENTS, REMINDER_DUE
from streams.slices.calendar import actions as calendar_actions
from streams.slices.calendar.explain import explain
from streams.slices.calendar.listings import LISTINGS
from streams.slices.calendar.settings import CalendarSettings
from streams.slices.calendar.timers import (
    CALENDAR_DISPATCH,
    WAKE_NUDGE,
    dispatch_waker,
    install_timers,
)
from streams.slices.slice import Demo, Slice

if TYPE_CHECKING:
    from streams.slices.context import SliceContext


def install_stream(ctx: SliceContext, waker: Any) -> None:
    from streams.slices.calendar.stream import install_stream

    install_stream(ctx, waker)


def load_demo() -> Demo:
    from streams.slices.calendar import demo

    return demo


SLICE = Slice(
    name="calendar",
    settings=CalendarSettings,
    contracts=(CALENDAR_EVENTS, REMINDER_DUE),
    install_timers=install_timers,
    install_stream=install_stream,
    explain=explain,
    demo=load_demo,
    listings=LISTINGS,
    actions=calendar_actions.ACTIONS,
)

__all__ = ["CALENDAR_DISPATCH", "SLICE", "WAKE_NUDGE", "dispatch_waker", "install_timers"]
