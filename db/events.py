"""Repository of ``calendar.events`` (with ``calendar.event_tombstones`` and
``calendar.event_prune_horizon``): one function per statement in ``db/queries/events.sql``.
An event state also makes and skips its reminder rows (``calendar.event_reminders``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from db.connector import Connection
from db.queries import sql
from db.versioned import Advanced
from streams.contracts.calendar import CalendarEventChanged
from streams.domain.calendar import ReminderSlot

# Where an input message was read: (partition, offset) of the events topic.
Source = tuple[int, int]


@dataclass(frozen=True, slots=True)
class EventsApplied:
    """What one batch of event states did."""

    applied: set[str]
    """EventIds (text) whose new state was stored (the rest were stale or replayed)."""
    made_pending: int
    """Reminder rows made Pending (inserted, or a Skipped one re-opened)."""
    earliest_due: datetime | None
    """The earliest DueAt of those rows (None when there are none)."""
    skipped: int
    """Pending reminders the stored states no longer want, now Skipped."""


async def apply(
    conn: Connection,
    events: Sequence[CalendarEventChanged],
    unwanted_reasons: Sequence[str],
    insertable: Sequence[ReminderSlot],
    also_wanted: Sequence[UUID],
    now: datetime,
    fingerprints: Sequence[str],
    sources: Mapping[UUID, Source] | None = None,
    traceparents: Mapping[UUID, str] | None = None,
) -> EventsApplied:
    """Store newer event states and, for those stored, ensure the ``insertable`` reminders
    and skip the Pending ones they no longer want (with the event's reason, one per event
    in ``unwanted_reasons``); wanted are the ``insertable`` ones and ``also_wanted`` (those
    already due at the change: kept, never created). The event's input (partition, offset,
    Version) is kept on it and on the reminders it creates, and each state's fingerprint (one
    per event in ``fingerprints``) on the event, and its input's trace context
    (``traceparents``, validated by streams.tracing; NULL for the others); one statement for
    the batch."""
    if not events:
        return EventsApplied(set(), 0, None, 0)
    src = [(sources or {}).get(e.event_id) for e in events]
    args = (
        [e.event_id for e in events],
        [e.tenant_id for e in events],
        [e.owner_user_id for e in events],
        [e.client_user_id for e in events],
        [e.kind for e in events],
        [e.start_at for e in events],
        [e.time_zone for e in events],
        [e.status.value for e in events],
        ["{" + ",".join(map(str, sorted(set(e.reminder_offsets_minutes)))) + "}" for e in events],
        [e.appointment_id for e in events],
        [e.version for e in events],
        [e.occurred_at for e in events],
        now,
        [x[0] if x else None for x in src],
        [x[1] if x else None for x in src],
        list(unwanted_reasons),
        list(also_wanted),
        [s.reminder_id for s in insertable],
        [s.event_id for s in insertable],
        [s.offset_minutes for s in insertable],
        [s.due_at for s in insertable],
        list(fingerprints),
        [(traceparents or {}).get(e.event_id) for e in events],
    )
    row = await conn.fetchrow(sql("events_apply"), *args)
    return EventsApplied(
        set(row["applied"] or ()), row["made"], row["earliest_due"], row["skipped"]
    )


async def version_advance(
    conn: Connection,
    events: Sequence[CalendarEventChanged],
    fingerprints: Sequence[str],
    now: datetime,
) -> Advanced:
    """Move Version/OccurredAt forward where the stored fingerprint equals the state's (one
    per event in ``fingerprints``); say which are stale. The rest need apply."""
    if not events:
        return Advanced()
    rows = await conn.fetch(
        sql("events_version_advance"),
        [e.event_id for e in events],
        [e.version for e in events],
        [e.occurred_at for e in events],
        list(fingerprints),
        now,
    )
    return Advanced.from_rows(rows, "event_id")


async def count(conn: Connection, event_ids: Sequence[UUID]) -> int:
    return int(await conn.fetchval(sql("events_count"), list(event_ids)))


async def seed(
    conn: Connection,
    *,
    events: int,
    offsets: Sequence[int],
    start: datetime,
    spread_ms: int = 1,
) -> int:
    """Bulk-insert Planned events with Pending reminders (benchmarks and tests only)."""
    n = await conn.fetchval(sql("events_seed"), start, list(offsets), spread_ms, events)
    return int(n)


async def analyze(conn: Connection) -> None:
    await conn.execute(sql("events_analyze"))


async def explain(conn: Connection, event_id: UUID) -> dict[str, Any] | None:
    row = await conn.fetchrow(sql("events_explain"), event_id)
    return dict(row) if row is not None else None


@dataclass(frozen=True, slots=True)
class EventsPruned:
    events: int
    reminders: int
    tombstones: int


async def prune(
    conn: Connection, started_before: datetime, limit: int, now: datetime
) -> EventsPruned:
    row = await conn.fetchrow(sql("events_prune"), started_before, limit, now)
    assert row is not None
    return EventsPruned(int(row["events"]), int(row["reminders"]), int(row["tombstones"]))


async def tombstones_prune(conn: Connection, pruned_before: datetime, limit: int) -> int:
    return int(await conn.fetchval(sql("events_tombstones_prune"), pruned_before, limit))
