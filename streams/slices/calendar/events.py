"""Calendar input: event states become the events projection and Pending reminder rows.

The recipe's versioned-state applier does the batching, caching and transaction; this
module says what an event's key, fingerprint and rows are (rules in streams/domain/calendar.py,
SQL in db/events.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from db import events as repo
from db.connector import Connection
from streams.contracts.calendar import CalendarEventChanged
from streams.domain.calendar import (
    ReminderSlot,
    fingerprint,
    insertable,
    unwanted_reason,
    wanted_reminders,
)
from streams.input.applier import Origin, VersionedStateApplier, Written
from streams.runtime import Runtime
from streams.tables.cache import KeyCache


@dataclass(frozen=True)
class CalendarWrite:
    reminders_pending: int = 0
    """Reminder rows made Pending (new, or Skipped rows wanted again)."""
    reminders_skipped: int = 0
    """Pending rows the new states no longer want."""
    earliest_due: datetime | None = None
    """The earliest DueAt among the rows made Pending (to wake the dispatcher then)."""


class CalendarEventsWriter:
    def key(self, message: CalendarEventChanged) -> str:
        return str(message.event_id)

    def fingerprint(self, message: CalendarEventChanged) -> str:
        return fingerprint(message)

    async def write(
        self,
        conn: Connection,
        changed: Sequence[CalendarEventChanged],
        unchanged: Sequence[CalendarEventChanged],
        now: datetime,
        origins: Mapping[str, Origin],
        fingerprints: Mapping[str, str],
    ) -> Written[CalendarWrite]:
        # The stored rows decide about the states the cache thought unchanged or stale:
        # those the database can neither advance nor call stale are stored in full.
        probe = await repo.version_advance(
            conn, unchanged, [fingerprints[self.key(e)] for e in unchanged], now
        )
        settled = probe.advanced | probe.stale.keys()
        changed = [*changed, *(e for e in unchanged if e.event_id not in settled)]
        keys = [self.key(e) for e in changed]
        found = [
            (e, o) for e, k in zip(changed, keys, strict=True) if (o := origins.get(k)) is not None
        ]
        sources = {e.event_id: (o.partition, o.offset) for e, o in found}
        # The input's trace context (tracing on, a traceparent on the record): the reminders'
        # output records continue that trace (streams/slices/calendar/dispatch.py).
        traceparents = {e.event_id: o.traceparent for e, o in found if o.traceparent is not None}
        # Worked out for every changed state; the statement keeps the rows of the ones it
        # stores (a stale state's reminders are not touched).
        reasons: list[str] = []
        creatable: list[ReminderSlot] = []
        already_due: list[UUID] = []
        for e in changed:
            reasons.append(unwanted_reason(e.status))
            wanted = wanted_reminders(e)
            slots = insertable(wanted, e.occurred_at)
            creatable.extend(slots)
            if len(slots) < len(wanted):
                already_due.extend(s.reminder_id for s in wanted if s not in slots)
        done = await repo.apply(
            conn,
            changed,
            reasons,
            creatable,
            already_due,
            now,
            [fingerprints[k] for k in keys],
            sources,
            traceparents,
        )
        return Written(
            applied=done.applied,
            advanced={str(i) for i in probe.advanced},
            details=CalendarWrite(done.made_pending, done.skipped, done.earliest_due),
            stored={str(k): v for k, v in probe.stale.items()},
        )


class CalendarEventsApplier(VersionedStateApplier[CalendarEventChanged, CalendarWrite]):
    """Applies a batch of event states; ``on_due`` hears the earliest new DueAt after commit."""

    def __init__(
        self,
        runtime: Runtime,
        cache: KeyCache | None = None,
        on_due: Callable[[datetime], None] | None = None,
    ) -> None:
        def after_commit(details: CalendarWrite) -> None:
            if on_due is not None and details.earliest_due is not None:
                on_due(details.earliest_due)

        super().__init__(runtime, CalendarEventsWriter(), cache, after_commit)
