"""Calendar repository: one method per statement in ``db/queries/calendar.sql``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from db.outbox import OutboxColumns
from db.queries import sql
from db.versioned import Advanced
from streams.contracts.calendar import CalendarEventChanged
from streams.domain.calendar import ReminderSlot

# Where an input message was read: (partition, offset) of the events topic.
Source = tuple[int, int]


@dataclass(frozen=True, slots=True)
class EventsApplied:
    """What one batch of event states did."""

    applied: set[UUID]
    """Events whose new state was stored (the rest were stale or replayed)."""
    made_pending: list[datetime]
    """DueAt of every reminder row made Pending (inserted, or a Skipped one re-opened)."""
    skipped: int
    """Pending reminders the stored states no longer want, now Skipped."""


async def events_apply(
    conn: asyncpg.Connection,
    events: Sequence[CalendarEventChanged],
    unwanted_reasons: Sequence[str],
    insertable: Sequence[ReminderSlot],
    also_wanted: Sequence[UUID],
    now: datetime,
    fingerprints: Sequence[str],
    sources: Mapping[UUID, Source] | None = None,
) -> EventsApplied:
    """Store newer event states and, for those stored, ensure the ``insertable`` reminders
    and skip the Pending ones they no longer want (with the event's reason, one per event
    in ``unwanted_reasons``); wanted are the ``insertable`` ones and ``also_wanted`` (those
    already due at the change: kept, never created). The event's input (partition, offset,
    Version) is kept on it and on the reminders it creates, and each state's fingerprint (one
    per event in ``fingerprints``) on the event; one statement for the batch."""
    if not events:
        return EventsApplied(set(), [], 0)
    src = [(sources or {}).get(e.event_id) for e in events]
    rows = await conn.fetch(
        sql("calendar_events_apply"),
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
    )
    applied: set[UUID] = set()
    made: list[datetime] = []
    skipped = 0
    for r in rows:
        if r["event_id"] is not None:
            applied.add(r["event_id"])
        elif r["due_at"] is not None:
            made.append(r["due_at"])
        else:
            skipped = int(r["skipped"])
    return EventsApplied(applied, made, skipped)


async def events_version_advance(
    conn: asyncpg.Connection,
    events: Sequence[CalendarEventChanged],
    fingerprints: Sequence[str],
    now: datetime,
) -> Advanced:
    """Move Version/OccurredAt forward where the stored fingerprint equals the state's (one
    per event in ``fingerprints``); say which are stale. The rest need events_apply."""
    if not events:
        return Advanced()
    rows = await conn.fetch(
        sql("calendar_events_version_advance"),
        [e.event_id for e in events],
        [e.version for e in events],
        [e.occurred_at for e in events],
        list(fingerprints),
        now,
    )
    return Advanced.from_rows(rows, "event_id")


@dataclass(frozen=True, slots=True)
class DueState:
    """Pending reminders after a dispatch run, as of its AsOf."""

    backlog: int
    """Due Pending rows (claimable or backing off after a failed attempt)."""
    ready: int
    """Of those, the rows claimable at AsOf (locked elsewhere, or beyond the run's budget)."""
    oldest_due: datetime | None
    """The earliest Pending DueAt."""
    next_wake: datetime | None
    """The earliest time after AsOf at which a Pending row becomes claimable."""


@dataclass(frozen=True, slots=True)
class ClaimedReminder:
    """A due Pending reminder locked by a dispatch batch, with its event's state."""

    reminder_id: UUID
    event_id: UUID
    offset_minutes: int
    due_at: datetime
    attempts: int
    """Failed dispatch attempts before this claim (poison rows)."""
    tenant_id: UUID
    owner_user_id: UUID
    client_user_id: UUID | None
    kind: str
    start_at: datetime
    time_zone: str
    event_status: str
    appointment_id: UUID | None


_CLAIMED = [f.name for f in fields(ClaimedReminder)]


@dataclass(frozen=True, slots=True)
class DueClaim:
    """What one dispatch claim locked, and what it saw around it."""

    rows: list[ClaimedReminder]
    seen: int
    """Claimable rows the claim's scan went through (claimed, or locked elsewhere)."""
    waiting: int
    """Due rows backing off (not claimable at the claim's AsOf)."""
    waiting_oldest: datetime | None
    next_wake: datetime | None
    """The earliest time after AsOf at which a Pending row becomes claimable."""

    @property
    def passed_over(self) -> int:
        """Rows SKIP LOCKED passed over: held by another transaction (row or its event)."""
        return max(0, self.seen - len(self.rows))


async def reminders_claim_due(
    conn: asyncpg.Connection, as_of: datetime, batch_size: int, exclude: Sequence[UUID]
) -> DueClaim:
    """Lock up to ``batch_size`` claimable reminders (with their event)."""
    rows = await conn.fetch(sql("calendar_reminders_claim_due"), as_of, batch_size, list(exclude))
    claimed = [
        ClaimedReminder(*(r[f] for f in _CLAIMED)) for r in rows if r["reminder_id"] is not None
    ]
    head = rows[0]  # the statement always returns a row (an empty claim: reminder_id NULL)
    return DueClaim(
        claimed,
        int(head["seen_due"]),
        int(head["waiting"]),
        head["waiting_oldest"],
        head["next_wake"],
    )


async def reminders_mark_dispatched(
    conn: asyncpg.Connection,
    transitions: Sequence[tuple[UUID, str, str | None]],
    as_of: datetime,
    outbox: OutboxColumns = ((), (), (), ()),
    failures: Sequence[tuple[UUID, datetime, str]] = (),
) -> tuple[int, int]:
    """Apply (reminder_id, 'Sent'|'Skipped', reason) to claimed rows, insert the batch's
    outbox rows (topics, keys, payloads, headers JSON) and record the failed attempts of
    its poison rows (reminder_id, retry time, error code; they stay Pending), in one
    statement; returns (rows changed, outbox rows inserted)."""
    if not transitions and not outbox[0] and not failures:
        return 0, 0
    row = await conn.fetchrow(
        sql("calendar_reminders_mark_dispatched"),
        [t[0] for t in transitions],
        [t[1] for t in transitions],
        [t[2] for t in transitions],
        as_of,
        *(list(column) for column in outbox),
        [f[0] for f in failures],
        [f[1] for f in failures],
        [f[2] for f in failures],
    )
    return int(row["marked"]), int(row["queued"])


async def reminders_due_state(conn: asyncpg.Connection, as_of: datetime) -> DueState:
    row = await conn.fetchrow(sql("calendar_reminders_due_state"), as_of)
    return DueState(
        backlog=int(row["backlog"]),
        ready=int(row["ready"]),
        oldest_due=row["oldest_due"],
        next_wake=row["next_wake"],
    )


async def events_count(conn: asyncpg.Connection, event_ids: Sequence[UUID]) -> int:
    return int(await conn.fetchval(sql("calendar_events_count"), list(event_ids)))


async def reminders_status_count(
    conn: asyncpg.Connection, event_ids: Sequence[UUID]
) -> dict[str, int]:
    rows = await conn.fetch(sql("calendar_reminders_status_count"), list(event_ids))
    return {str(r["status"]): int(r["n"]) for r in rows}


async def reminders_seed(
    conn: asyncpg.Connection,
    *,
    events: int,
    offsets: Sequence[int],
    start: datetime,
    spread_ms: int = 1,
) -> int:
    """Bulk-insert Planned events with Pending reminders (benchmarks and tests only)."""
    n = await conn.fetchval(sql("calendar_reminders_seed"), start, list(offsets), spread_ms, events)
    return int(n)


async def tables_analyze(conn: asyncpg.Connection) -> None:
    await conn.execute(sql("calendar_tables_analyze"))


async def reminder_explain(conn: asyncpg.Connection, reminder_id: UUID) -> dict[str, Any] | None:
    row = await conn.fetchrow(sql("calendar_reminder_explain"), reminder_id)
    return dict(row) if row is not None else None


async def event_explain(conn: asyncpg.Connection, event_id: UUID) -> dict[str, Any] | None:
    row = await conn.fetchrow(sql("calendar_event_explain"), event_id)
    return dict(row) if row is not None else None
