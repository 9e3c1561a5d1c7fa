"""Bulk seeding of calendar events and Pending reminder rows in SQL (tests and benchmarks)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg


async def seed_reminders(
    url: str, *, events: int, offsets: Sequence[int], start: datetime, spread_ms: int = 1
) -> int:
    """Insert ``events`` Planned events with one Pending reminder per offset, in bulk SQL."""
    conn = await asyncpg.connect(url)
    try:
        n = await conn.fetchval(
            """
            WITH ev AS (
                INSERT INTO calendar.events (event_id, tenant_id, owner_user_id, kind, start_at,
                    time_zone, status, reminder_offsets_minutes, version, occurred_at)
                SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'Meeting',
                       $1::timestamptz + make_interval(secs => i * $3::float8 / 1000), 'UTC',
                       'Planned', $2::int[], 1, $1::timestamptz - interval '1 day'
                FROM generate_series(1, $4::int) AS i
                RETURNING event_id, start_at, reminder_offsets_minutes
            ), ins AS (
                INSERT INTO calendar.event_reminders (reminder_id, event_id, offset_minutes, due_at)
                SELECT gen_random_uuid(), ev.event_id, o, ev.start_at - make_interval(mins => o)
                FROM ev, unnest(ev.reminder_offsets_minutes) AS o
                RETURNING 1
            ) SELECT count(*) FROM ins
            """,
            start,
            list(offsets),
            spread_ms,
            events,
        )
        await conn.execute("VACUUM ANALYZE calendar.events")
        await conn.execute("VACUUM ANALYZE calendar.event_reminders")
        return int(n)
    finally:
        await conn.close()
