"""Automation scheduler benchmarks, each beside its reference in the same run:

- throughput: claim + complete + outbox for 100,000 due rows, the real runner (no-op handler)
  vs bare SQL statements doing the same transitions (claim transaction, then complete +
  outbox transaction, per batch); target >= 0.75x (bench/targets.py);
- claim time with 1,000,000 Pending rows not yet due vs 10,000 (200 due each); target <= 2x.

Self-contained (no import from tests/): seeding is bulk SQL here.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta

import asyncpg

from bench import common
from bench.progress import spin
from bench.report import Measure, Target, measure
from bench.targets import AUTOMATION, targets
from db import scheduler as repo
from db.connector import Connection
from db.scheduler import ClaimedRow
from streams.clock import SystemClock
from streams.contracts.automation import AutomationType
from streams.domain.automation.revalidation import VALID
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.automation.handlers import HandlerRegistry, Outcome
from streams.slices.automation.runner import AutomationRunner, RunnerConfig
from streams.timers.context import RunContext

LEASE_SECONDS = 120.0

SEED = """
INSERT INTO automation.scheduler (
    scheduler_key, automation_type_id, trigger_type_id, scheduled_on, scheduled_local_date,
    time_zone_id, input_hash, setting_guid, source_type, source_guid)
SELECT 'reminder:' || s.setting || ':Doc:' || g.source || ':ExpiresOn:2026-12-31:' || i,
       'Reminder', 'DateBased', $1::timestamptz + make_interval(secs => i * 0.001),
       ($1::timestamptz)::date, 'UTC', encode(sha256(convert_to(g.source::text, 'UTF8')), 'hex'),
       s.setting, 'Doc', g.source
FROM generate_series(1, $2::int) AS i
CROSS JOIN (SELECT gen_random_uuid() AS setting) s
CROSS JOIN LATERAL (SELECT gen_random_uuid() AS source, i AS n) g
"""

# The reference: the same two transitions as bare statements. Claim: due Pending rows →
# Processing with a lease and a new Version. Complete: Completed with coordinates where the
# Version still matches, and one outbox row per completed row with the same payload fields.
BARE_CLAIM = """
WITH due AS (
    SELECT scheduler_id FROM automation.scheduler
    WHERE status_id = 'Pending' AND NOT is_on_support_hold AND due_on <= $1
    ORDER BY due_on LIMIT $2
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE automation.scheduler s
SET status_id = 'Processing', processing_lease_expires_on = $1 + make_interval(secs => $3),
    version = s.version + 1, updated_on = $1
FROM due WHERE s.scheduler_id = due.scheduler_id
RETURNING s.scheduler_id, s.version
"""
BARE_COMPLETE = """
WITH done AS (
    UPDATE automation.scheduler s
    SET status_id = 'Completed', processing_lease_expires_on = NULL,
        dispatch_result_json = jsonb_build_object('Topic', 'pin.automation.dispatch-requested.v1',
            'Key', s.scheduler_key, 'RequestedAt', $3::timestamptz, 'Attempt', s.retry_count + 1,
            'RunId', $4::text),
        version = s.version + 1, updated_on = $3
    FROM unnest($1::bigint[], $2::bigint[]) AS c(scheduler_id, token)
    WHERE s.scheduler_id = c.scheduler_id AND s.version = c.token AND s.status_id = 'Processing'
    RETURNING s.*
)
INSERT INTO ops.outbox (topic, key, payload, headers)
SELECT 'pin.automation.dispatch-requested.v1', d.scheduler_key,
       json_build_object('ContractVersion', 1, 'SchedulerKey', d.scheduler_key,
           'AutomationType', d.automation_type_id, 'TriggerType', d.trigger_type_id,
           'SettingGuid', d.setting_guid, 'SourceType', d.source_type, 'SourceGuid', d.source_guid,
           'SubscriptionGuid', d.subscription_guid, 'ScheduledOn', d.scheduled_on,
           'ScheduledLocalDate', d.scheduled_local_date, 'TimeZoneId', d.time_zone_id,
           'InputHash', d.input_hash, 'RequestedAt', $3::timestamptz, 'RetryCount', d.retry_count),
       jsonb_build_object('correlation-id', $4::text, 'contract-version', '1',
           'event-type', 'DispatchRequested')
FROM done d
"""


class NoopHandler:
    """Revalidates nothing: every claimed row is valid (isolates the scheduler's own cost)."""

    automation_type = AutomationType.REMINDER
    daily_retry = False

    async def revalidate(
        self, conn: Connection, rows: Sequence[ClaimedRow]
    ) -> Mapping[int, Outcome]:
        return {r.scheduler_id: VALID for r in rows}


def database(template: str | None = None) -> AbstractAsyncContextManager[str]:
    """A fresh database (migrated, or a copy of ``template``), dropped afterwards."""
    return common.database(template, prefix="bench_auto")


async def seed(url: str, start: datetime, rows: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        await spin(f"  seeding {rows:,} scheduler rows", conn.execute(SEED, start, rows))
        await conn.execute("VACUUM (FREEZE, ANALYZE) automation.scheduler")
    finally:
        await conn.close()


async def bare(url: str, as_of: datetime, batch: int) -> tuple[int, float]:
    conn = await asyncpg.connect(url)
    try:
        total = 0
        t = time.perf_counter()
        while True:
            async with conn.transaction():
                claimed = await conn.fetch(BARE_CLAIM, as_of, batch, LEASE_SECONDS)
            if claimed:
                async with conn.transaction():
                    await conn.execute(
                        BARE_COMPLETE,
                        [r["scheduler_id"] for r in claimed],
                        [r["version"] for r in claimed],
                        as_of,
                        uuid.uuid4().hex[:12],
                    )
            total += len(claimed)
            if len(claimed) < batch:
                break
        return total, time.perf_counter() - t
    finally:
        await conn.close()


async def real(url: str, as_of: datetime, batch: int) -> tuple[int, float]:
    runtime = Runtime(
        Settings(database_url=url, db_pool_min_size=1, db_pool_max_size=2), clock=SystemClock()
    )
    runner = AutomationRunner(
        runtime,
        HandlerRegistry([NoopHandler()]),
        RunnerConfig(
            batch_size=batch,
            lease=timedelta(seconds=LEASE_SECONDS),
        ),
    )
    try:
        await runtime.pool()
        t = time.perf_counter()
        result = await runner.run_once(
            RunContext.at(as_of, clock=runner.clock, budget=timedelta(hours=1))
        )
        return result.completed, time.perf_counter() - t
    finally:
        await runtime.close()


async def throughput(rows: int = 100_000, batch: int = 200) -> dict[str, float]:
    print(f"\n== automation claim + complete + outbox: {rows:,} due rows, batch {batch} ==")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    async with database() as seed_url:
        await seed(seed_url, start, rows)
        name = seed_url.rsplit("/", 1)[1]
        await common.admin(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
        )
        as_of = start + timedelta(days=1)
        figures: dict[str, float] = {}
        for label, contender in (
            ("bare SQL statements", bare),
            ("real runner (no-op handler)", real),
            ("bare SQL statements (2nd)", bare),
            ("real runner (2nd)", real),
        ):
            async with database(template=name) as url:
                done, seconds = await contender(url, as_of, batch)
                assert done == rows, f"{label} completed {done} of {rows}"
                figures[label] = done / seconds
                print(
                    f"  {label:<28} {done:>8,} rows in {seconds:6.2f} s = {done / seconds:>9,.0f} rows/s"
                )
    ref = max(figures["bare SQL statements"], figures["bare SQL statements (2nd)"])
    ours = max(figures["real runner (no-op handler)"], figures["real runner (2nd)"])
    figures["ratio"] = ours / ref
    print(f"  ratio real/bare (best of 2 each) = {figures['ratio']:.2f}   (target >= 0.75)")
    return figures


async def claim_time(
    small: int = 10_000, large: int = 1_000_000, repeats: int = 300
) -> dict[str, float]:
    print(
        f"\n== automation claim time: {small:,} vs {large:,} Pending rows not yet due (200 due) =="
    )
    now = datetime(2026, 6, 1, tzinfo=UTC)
    out: dict[str, float] = {}
    for label, n in (("small", small), ("large", large)):
        async with database() as url:
            await seed(url, now - timedelta(hours=1), 200)
            await seed(url, now + timedelta(days=1), n)
            conn = await asyncpg.connect(url)
            try:
                times = []
                for i in range(repeats + repeats // 5):
                    tx = conn.transaction()
                    await tx.start()
                    t = time.perf_counter()
                    rows = await repo.claim(conn, now, 200, LEASE_SECONDS)
                    if i >= repeats // 5:  # the first fifth warms caches and is not counted
                        times.append((time.perf_counter() - t) * 1000)
                    await tx.rollback()
                    assert len(rows) == 200, len(rows)
            finally:
                await conn.close()
        out[label] = statistics.median(times)
        p95 = sorted(times)[int(0.95 * (len(times) - 1))]
        print(f"  {n:>9,} not due: claim median {out[label]:.3f} ms  p95 {p95:.3f} ms")
    out["ratio"] = out["large"] / out["small"]
    print(f"  ratio large/small = {out['ratio']:.2f}   (target <= 2.0)")
    return out


QUICK = {"rows": 5_000, "large": 100_000}


async def run(rows: int = 100_000, small: int = 10_000, large: int = 1_000_000) -> list[Measure]:
    batch = 200
    t = await throughput(rows, batch)
    c = await claim_time(small, large)
    ours = max(t["real runner (no-op handler)"], t["real runner (2nd)"])
    ref = max(t["bare SQL statements"], t["bare SQL statements (2nd)"])
    return [
        measure(
            "automation: runner vs bare SQL",
            "rows/s",
            ours,
            ref,
            targets=targets(AUTOMATION),
            bench="automation",
            detail=f"{rows:,} due rows, batch {batch}, no-op handler, best of 2 each; "
            "reference: claim + complete/outbox as bare statements",
        ),
        measure(
            "automation: claim time, large vs small table",
            "ms",
            c["large"],
            c["small"],
            targets=[Target("<=", 2, on="ratio")],
            higher_is_better=False,
            bench="automation",
            detail=f"median of 300 claims of 200; {large:,} vs {small:,} rows not yet due",
        ),
    ]
