"""Calendar repository: one method per statement in ``db/queries/calendar.sql``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

import asyncpg

from db.queries import sql
from streams.contracts.calendar import CalendarEventChanged
from streams.domain.calendar import ReminderSlot


async def upsert_events(
    conn: asyncpg.Connection, events: Sequence[CalendarEventChanged], now: datetime
) -> set[UUID]:
    """Store newer event states; returns the ids whose state was applied."""
    if not events:
        return set()
    rows = await conn.fetch(
        sql("calendar_events_upsert"),
        [e.event_id for e in events],
        [e.tenant_id for e in events],
        [e.owner_user_id for e in events],
        [e.client_user_id for e in events],
        [e.kind for e in events],
        [e.start_at for e in events],
        [e.time_zone for e in events],
        [e.status.value for e in events],
        [",".join(str(m) for m in sorted(set(e.reminder_offsets_minutes))) for e in events],
        [e.appointment_id for e in events],
        [e.version for e in events],
        [e.occurred_at for e in events],
        now,
    )
    return {r["event_id"] for r in rows}


async def skip_unwanted_reminders(
    conn: asyncpg.Connection, event_ids: Sequence[UUID], wanted: Sequence[UUID], now: datetime
) -> int:
    """Skip the Pending reminders of ``event_ids`` that are not in ``wanted``."""
    if not event_ids:
        return 0
    rows = await conn.fetch(sql("calendar_reminders_skip_unwanted"), list(event_ids), list(wanted), now)
    return len(rows)


async def ensure_reminders(
    conn: asyncpg.Connection, slots: Sequence[ReminderSlot], now: datetime
) -> list[datetime]:
    """Insert (or re-open Skipped) reminders; returns the DueAt of every row made Pending."""
    if not slots:
        return []
    rows = await conn.fetch(
        sql("calendar_reminders_ensure"),
        [s.reminder_id for s in slots],
        [s.event_id for s in slots],
        [s.offset_minutes for s in slots],
        [s.due_at for s in slots],
        now,
    )
    return [r["due_at"] for r in rows]
