"""Bulk seeding of calendar events and Pending reminder rows (tests and benchmarks)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from db import events as repo
from db.connector import connect


async def seed_reminders(
    url: str, *, events: int, offsets: Sequence[int], start: datetime, spread_ms: int = 1
) -> int:
    """Insert ``events`` Planned events with one Pending reminder per offset, in bulk SQL,
    then refresh the planner's statistics so the measured statements see real sizes."""
    conn = await connect(url)
    try:
        n = await repo.seed(conn, events=events, offsets=offsets, start=start, spread_ms=spread_ms)
        await repo.analyze(conn)
        return n
    finally:
        await conn.close()
