"""Shared bench helpers: throwaway databases, seeding reminder rows in bulk, percentiles."""

from __future__ import annotations

import os
import statistics
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from db.migrate import migrate
from devkit.seed import seed_reminders

__all__ = ["seed_reminders"]

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
