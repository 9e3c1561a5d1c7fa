"""One-off reads of a test database by URL (tests that run workers hold no pool)."""

from __future__ import annotations

from typing import Any

import asyncpg


async def scalar(db: str, sql: str, *args: Any) -> Any:
    """The first column of the first row of ``sql``, on a connection of its own."""
    conn = await asyncpg.connect(db)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()
