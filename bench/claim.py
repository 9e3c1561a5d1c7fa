"""Claim cost as the table grows: 10,000 vs 10,000,000 Pending rows not yet due, 200 due rows
each time (SPEC §5: within 2x). ``BENCH_CLAIM_LARGE`` changes the large size.

The large table is loaded in chunks of one ``INSERT ... SELECT FROM generate_series``
with keys and indexes dropped and rebuilt afterwards (bench/bulk.py), then frozen and
analysed so both sizes are measured in the same steady state.
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import UTC, datetime, timedelta

import asyncpg

from bench.bulk import without_indexes
from bench.common import database, pct
from bench.progress import Progress, spin
from bench.report import Measure, Target, measure
from db import event_reminders as repo

# ``$3 - $2 + 1`` Planned events starting at $1 + i ms, each with one Pending reminder due at
# StartAt (offset 0). Ids are random UUIDs, as the service makes them.
SEED = """
WITH ev AS (
    INSERT INTO calendar.events (event_id, tenant_id, owner_user_id, kind, start_at,
        time_zone, status, reminder_offsets_minutes, version, occurred_at)
    SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'Meeting',
           $1::timestamptz + make_interval(secs => i / 1000.0), 'UTC', 'Planned', '{0}', 1,
           $1::timestamptz - interval '1 day'
    FROM generate_series($2::bigint, $3::bigint) AS i
    RETURNING event_id, start_at
)
INSERT INTO calendar.event_reminders (reminder_id, event_id, offset_minutes, due_at)
SELECT gen_random_uuid(), ev.event_id, 0, ev.start_at FROM ev
"""
TABLES = ("calendar.events", "calendar.event_reminders")
CHUNK = 500_000
DUE = 200
QUICK = {"large": 200_000, "repeats": 100}


def large_default() -> int:
    return int(os.environ.get("BENCH_CLAIM_LARGE", "10000000"))


async def seed(url: str, now: datetime, not_due: int) -> None:
    """DUE rows due an hour ago and ``not_due`` rows due from tomorrow on."""
    conn = await asyncpg.connect(url)
    try:
        t = time.perf_counter()
        async with without_indexes(conn, TABLES, f"  rebuilding keys and indexes ({not_due:,})"):
            await conn.execute(SEED, now - timedelta(hours=1), 1, DUE)
            with Progress(f"  seeding {not_due:,} rows", total=not_due, unit="rows") as progress:
                for lo in range(1, not_due + 1, CHUNK):
                    hi = min(not_due, lo + CHUNK - 1)
                    await conn.execute(SEED, now + timedelta(days=1), lo, hi)
                    progress.update(hi)
        # Background work after a bulk load (hint bits, visibility map) is done before measuring.
        await spin("  VACUUM (FREEZE, ANALYZE)", conn.execute("VACUUM (FREEZE, ANALYZE)"))
        print(f"  {not_due:,} rows ready in {time.perf_counter() - t:.1f} s")
    finally:
        await conn.close()


async def timings(url: str, as_of: datetime, repeats: int) -> list[float]:
    conn = await asyncpg.connect(url)
    try:
        times = []
        for i in range(repeats + repeats // 5):
            tx = conn.transaction()
            await tx.start()
            t = time.perf_counter()
            rows = (await repo.claim_due(conn, as_of, DUE, [])).rows
            if i >= repeats // 5:  # the first fifth warms caches and is not counted
                times.append((time.perf_counter() - t) * 1000)
            await tx.rollback()
            assert len(rows) == DUE, len(rows)
        return times
    finally:
        await conn.close()


async def run(small: int = 10_000, large: int | None = None, repeats: int = 500) -> list[Measure]:
    large = large if large is not None else large_default()
    print(f"\n== claim time: {small:,} vs {large:,} Pending rows not yet due ({DUE} due) ==")
    now = datetime(2026, 6, 1, tzinfo=UTC)
    medians: dict[int, float] = {}
    for n in (small, large):
        async with database() as url:
            await seed(url, now, n)
            times = await timings(url, now, repeats)
        medians[n] = statistics.median(times)
        print(f"  {n:>10,} not due: claim median {medians[n]:.3f} ms  p95 {pct(times, 95):.3f} ms")
    print(f"  ratio large/small = {medians[large] / medians[small]:.2f}   (target <= 2)")
    return [
        measure(
            "claim time: large vs small table",
            "ms",
            medians[large],
            medians[small],
            targets=[Target("<=", 2, on="ratio")],
            higher_is_better=False,
            bench="claim",
            detail=f"median of {repeats} claims of {DUE}; {large:,} vs {small:,} rows not yet due",
        )
    ]
