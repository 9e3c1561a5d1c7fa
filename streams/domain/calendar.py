"""Calendar reminder rules (seed 000): which reminder rows an event state should have."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from uuid import UUID

from streams.contracts.calendar import CalendarEventChanged, EventStatus

# Namespace of ReminderId = uuid5(namespace, "event:offset:due"); fixed forever.
REMINDER_NAMESPACE = UUID("6f0c7f8e-5b0a-4d6c-9a53-2f1f4b7f7c11")


# Why a Pending reminder becomes Skipped. A closed event cascades with its own reason
# (at materialization and at dispatch alike); an open event's reminder that its new state
# no longer wants (rescheduled, offset removed) is NoLongerScheduled.
CLOSED_EVENT_REASONS = {
    EventStatus.CANCELLED: "EventCancelled",
    EventStatus.COMPLETED: "EventCompleted",
}
NO_LONGER_SCHEDULED = "NoLongerScheduled"
MANUAL_CANCEL = "ManualCancel"
"""The skip reason of a console cancel: an operator's decision, terminal until an operator
reopens it. No input makes such a row Pending again: a reminder's meaning is its identity
(EventId, OffsetMinutes, DueAt), so an input that wants the same row again (a replay, a
change of Kind or owner, the event cancelled and planned again, rescheduled away and back)
has not changed what the operator cancelled; a reschedule or another offset is another
identity, a new row."""


def dispatch_skip_reason(status: EventStatus) -> str | None:
    """At dispatch: None sends the reminder (open event), else the reason it is Skipped."""
    return CLOSED_EVENT_REASONS.get(status)


def unwanted_reason(status: EventStatus) -> str:
    """At materialization: why the event's no-longer-wanted Pending reminders are Skipped."""
    return CLOSED_EVENT_REASONS.get(status, NO_LONGER_SCHEDULED)


@dataclass(frozen=True, slots=True)
class ReminderSlot:
    reminder_id: UUID
    event_id: UUID
    offset_minutes: int
    due_at: datetime


def utc_text(instant: datetime) -> str:
    """The instant itself, not how its offset was written: 10:00Z and 11:00+01:00 read alike."""
    return instant.astimezone(UTC).isoformat()


def reminder_id(event_id: UUID, offset_minutes: int, due_at: datetime) -> UUID:
    """The reminder's identity: same event, offset and due instant → same id, on every replay.

    Built from the UTC form, which is what every UTC-written input produced before, so
    identities of rows already stored from such inputs are unchanged.
    """
    return _reminder_id(str(event_id), offset_minutes, due_at)


def _reminder_id(event_text: str, offset_minutes: int, due_at: datetime) -> UUID:
    return _uuid5(f"{event_text}:{offset_minutes}:{utc_text(due_at)}")


_NAMESPACE = REMINDER_NAMESPACE.bytes
# RFC 4122 variant (10xx) and version 5 in the top bits of the clock_seq and time_hi fields.
_KEEP = ~((0xC000 << 48) | (0xF000 << 64)) & ((1 << 128) - 1)
_MARK = (0x8000 << 48) | (5 << 76)


def _uuid5(name: str) -> UUID:
    """``uuid5(REMINDER_NAMESPACE, name)``: the same SHA-1, variant and version bits, without
    the standard library's per-call argument checks (two ids per ingested event)."""
    digest = int.from_bytes(hashlib.sha1(_NAMESPACE + name.encode()).digest()[:16], "big")
    return UUID(int=(digest & _KEEP) | _MARK)


@lru_cache(maxsize=4096)
def _minutes(offset: int) -> timedelta:
    return timedelta(minutes=offset)


def wanted_reminders(event: CalendarEventChanged) -> list[ReminderSlot]:
    """Every reminder the event's current state calls for: one per distinct offset, open events only.

    DueAt = StartAt - offset. Cancelled/Completed events want none (the cascade).
    """
    if not event.status.is_open:
        return []
    slots = []
    # Once per event (this runs for every ingested state): the id's text, and StartAt in UTC
    # so that each DueAt is already in UTC when its identity is formatted.
    event_text = str(event.event_id)
    start = event.start_at.astimezone(UTC)
    for offset in sorted(set(event.reminder_offsets_minutes)):
        due = start - _minutes(offset)
        slots.append(
            ReminderSlot(_reminder_id(event_text, offset, due), event.event_id, offset, due)
        )
    return slots


def insertable(slots: Iterable[ReminderSlot], occurred_at: datetime) -> list[ReminderSlot]:
    """The wanted reminders that may be created by a change that happened at ``occurred_at``.

    A reminder already due when the change happened is not created (it would fire late
    and at once); one that already exists is kept, since it was due in the future
    when it was made and the dispatcher may simply not have reached it yet.
    """
    return [s for s in slots if s.due_at >= occurred_at]


def fingerprint(event: CalendarEventChanged) -> str:
    """Digest of everything that decides the event's projection and reminders (not Version/OccurredAt).

    Two states with the same fingerprint lead to the same rows, so the second can skip PostgreSQL.
    """
    parts = [
        str(event.tenant_id),
        str(event.owner_user_id),
        str(event.client_user_id),
        event.kind,
        utc_text(event.start_at),
        event.time_zone,
        event.status.value,
        ",".join(str(m) for m in sorted(set(event.reminder_offsets_minutes))),
        str(event.appointment_id),
    ]
    return hashlib.blake2b("|".join(parts).encode(), digest_size=12).hexdigest()


def newest_per_event(events: Iterable[CalendarEventChanged]) -> list[CalendarEventChanged]:
    """Collapse a batch to the newest Version of each event (state messages: only the last counts)."""
    newest: dict[UUID, CalendarEventChanged] = {}
    for e in events:
        seen = newest.get(e.event_id)
        if seen is None or e.version > seen.version:
            newest[e.event_id] = e
    return list(newest.values())
