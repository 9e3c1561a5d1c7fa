"""Shared bench helpers: throwaway databases, seeding reminder rows in bulk, percentiles."""

from __future__ import annotations

import os
import statistics
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from db.migrate import migrate

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://reminders@127.0.0.1:55432/reminders")
KAFKA_BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:19092")


def url_for(name: str) -> str:
    return urlunsplit(urlsplit(DATABASE_URL)._replace(path=f"/{name}"))


async def admin(sql: str) -> None:
    conn = await asyncpg.connect(url_for("postgres"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@asynccontextmanager
async def database(template: str | None = None, prefix: str = "bench") -> AsyncIterator[str]:
    """A fresh database (migrated, or a copy of ``template``), dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    await admin(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    try:
        url = url_for(name)
        if template is None:
            await migrate(url)
        yield url
    finally:
        await admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def seed_reminders(
    url: str, *, events: int, offsets: Sequence[int], start: datetime, spread_ms: int = 1
) -> int:
    """Insert ``events`` Planned events with one Pending reminder per offset, in bulk SQL."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            """
            INSERT INTO calendar.events (event_id, tenant_id, owner_user_id, kind, start_at,
                time_zone, status, reminder_offsets_minutes, version, occurred_at)
            SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'Meeting',
                   $1::timestamptz + make_interval(secs => i * $3::float8 / 1000), 'UTC',
                   'Planned', $2::int[], 1, $1::timestamptz - interval '1 day'
            FROM generate_series(1, $4::int) AS i
            """,
            start,
            list(offsets),
            spread_ms,
            events,
        )
        n = await conn.fetchval(
            """
            WITH ins AS (
                INSERT INTO calendar.event_reminders (reminder_id, event_id, offset_minutes, due_at)
                SELECT gen_random_uuid(), e.event_id, o, e.start_at - make_interval(mins => o)
                FROM calendar.events e, unnest(e.reminder_offsets_minutes) AS o
                RETURNING 1
            ) SELECT count(*) FROM ins
            """
        )
        await conn.execute("VACUUM ANALYZE calendar.events")
        await conn.execute("VACUUM ANALYZE calendar.event_reminders")
        return int(n)
    finally:
        await conn.close()


def pct(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def summary(values: Sequence[float]) -> str:
    return (
        f"n={len(values)} p50={pct(values, 50):.3f} p95={pct(values, 95):.3f} "
        f"p99={pct(values, 99):.3f} max={max(values) if values else float('nan'):.3f} "
        f"mean={statistics.fmean(values) if values else float('nan'):.3f}"
    )
