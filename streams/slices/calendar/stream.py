"""The calendar slice's stream part: the calendar-events agent (events projection + Pending
reminder rows) with the calendar-event-cache table in front of PostgreSQL."""

from __future__ import annotations

from streams.contracts import CALENDAR_EVENTS
from streams.slices.calendar.events import CalendarEventsApplier
from streams.slices.calendar.timers import Waker
from streams.slices.context import SliceContext


def install_stream(ctx: SliceContext, waker: Waker) -> None:
    cache = ctx.cache_table(
        "calendar-event-cache", help="EventId -> last applied Version and reminder fingerprint"
    )
    # Two batches in flight: event states are Version-guarded and their reminders follow
    # only the states stored, so a batch committing before an earlier one changes nothing
    # (docs/architecture.md, "Two batches in flight").
    ctx.input(
        "calendar-events",
        CALENDAR_EVENTS,
        CalendarEventsApplier(ctx.runtime, cache, waker),
        pipeline_depth=2,
    )
