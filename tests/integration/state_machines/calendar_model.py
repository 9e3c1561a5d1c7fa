"""The reference model of calendar reminders (seed 000, ReminderDispatchJob; the event's
reminder rules of event-reminder.md as the slice implements them), from the rules alone.

The world: two events of one tenant; each state has a status, a StartAt and reminder offsets
in minutes. Rules it follows:
- State messages: the newest Version of an event wins; an older or equal one changes nothing.
- An open event (Planned, InProgress) wants one reminder per distinct offset, DueAt = StartAt -
  offset; the reminder's identity is (event, offset, DueAt). A closed event wants none.
- A reminder is created only by a state that happened no later than its DueAt (OccurredAt <=
  DueAt); one already due is never created late.
- A reminder is sent at most once, only while its event's current state wants it, and never
  before its DueAt in database (true) time (the claim is ``DueAt < AsOf``).
- An operator's cancel stands until an operator reopens it: no input (a newer Version that
  still wants the reminder, a replay) makes it Pending again (docs/console.md).
- A reminder wanted continuously from a state that created it until the end is sent (exactly
  once) by then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

EVENTS = (UUID(int=0xE1), UUID(int=0xE2))
TENANT = UUID(int=0x7E)
OWNER = UUID(int=0x0E)
OPEN = ("Planned", "InProgress")

# (event id, offset minutes, DueAt)
Identity = tuple[str, int, datetime]


@dataclass(frozen=True)
class EventState:
    status: str
    start: datetime
    offsets: tuple[int, ...]


@dataclass
class CalendarModel:
    applied: dict[str, tuple[int, EventState]] = field(default_factory=dict)
    live: dict[Identity, bool] = field(default_factory=dict)
    # identity -> step of the last accepted cancel
    cancelled: dict[Identity, int] = field(default_factory=dict)

    def deliver(
        self, event: str, version: int, state: EventState, occurred_at: datetime, step: int
    ) -> bool:
        current = self.applied.get(event)
        if current is not None and version <= current[0]:
            return False
        self.applied[event] = (version, state)
        wanted = self.wanted()
        for ident in list(self.live):
            if ident[0] == event and ident not in wanted:
                self.live[ident] = False
        for ident in wanted:
            if ident[0] == event and ident[2] >= occurred_at:
                # Created, or made Pending again; an operator's cancel stays.
                self.live[ident] = True
        return True

    def wanted(self) -> set[Identity]:
        out: set[Identity] = set()
        for event, (_, state) in self.applied.items():
            if state.status in OPEN:
                for offset in set(state.offsets):
                    out.add((event, offset, state.start - timedelta(minutes=offset)))
        return out

    def dues(self) -> list[datetime]:
        return [i[2] for i in self.wanted()]

    def obligations(self) -> set[Identity]:
        wanted = self.wanted()
        return {
            i for i, live in self.live.items() if live and i in wanted and i not in self.cancelled
        }
