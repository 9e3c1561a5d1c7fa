"""Claim cost as the table grows: 10k vs 1M Pending rows not yet due, 200 due rows each time."""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime, timedelta

import asyncpg

from bench.common import database, pct, seed_reminders
from db import calendar as repo


async def measure(url: str, as_of: datetime, repeats: int) -> list[float]:
    conn = await asyncpg.connect(url)
    try:
        times = []
        for i in range(repeats + repeats // 5):
            tx = conn.transaction()
            await tx.start()
            t = time.perf_counter()
            rows, _ = await repo.reminders_claim_due(conn, as_of, 200, [])
            if i >= repeats // 5:  # the first fifth warms caches and is not counted
                times.append((time.perf_counter() - t) * 1000)
            await tx.rollback()
            assert len(rows) == 200, len(rows)
        return times
    finally:
        await conn.close()


async def run(small: int = 10_000, large: int = 1_000_000, repeats: int = 500) -> dict[str, float]:
    print(f"\n== claim time: {small:,} vs {large:,} Pending rows not yet due (200 due) ==")
    now = datetime(2026, 6, 1, tzinfo=UTC)
    out: dict[str, float] = {}
    for label, n in (("small", small), ("large", large)):
        async with database() as url:
            await seed_reminders(url, events=200, offsets=[0], start=now - timedelta(hours=1))
            await seed_reminders(url, events=n, offsets=[0], start=now + timedelta(days=1))
            conn = await asyncpg.connect(url)
            try:
                # Let background work after the bulk load (hint bits, visibility map) finish.
                await conn.execute("VACUUM (FREEZE, ANALYZE)")
            finally:
                await conn.close()
            times = await measure(url, now, repeats)
        out[label] = statistics.median(times)
        print(f"  {n:>9,} not due: claim median {out[label]:.3f} ms  p95 {pct(times, 95):.3f} ms")
    out["ratio"] = out["large"] / out["small"]
    print(f"  ratio large/small = {out['ratio']:.2f}   (target <= 2.0)")
    return out
