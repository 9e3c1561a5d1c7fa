"""Repository of retention: one function per statement in db/queries/retention.sql."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from db.queries import sql


@dataclass(frozen=True, slots=True)
class EventsPruned:
    events: int
    reminders: int
    tombstones: int


async def calendar_events_prune(
    conn: asyncpg.Connection, started_before: datetime, limit: int, now: datetime
) -> EventsPruned:
    row = await conn.fetchrow(sql("retention_calendar_events_prune"), started_before, limit, now)
    assert row is not None
    return EventsPruned(int(row["events"]), int(row["reminders"]), int(row["tombstones"]))


async def calendar_tombstones_prune(
    conn: asyncpg.Connection, pruned_before: datetime, limit: int
) -> int:
    return int(
        await conn.fetchval(sql("retention_calendar_tombstones_prune"), pruned_before, limit)
    )


async def scheduler_prune(conn: asyncpg.Connection, before: datetime, limit: int) -> int:
    return int(await conn.fetchval(sql("retention_scheduler_prune"), before, limit))
