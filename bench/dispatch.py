"""Dispatch throughput: the real dispatcher vs one bare SQL statement per batch, same data, same run."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg

from bench.common import admin, database, seed_reminders
from bench.cpu import PerEvent, scale_measures
from bench.dispatch_procs import run_processes
from bench.report import Measure, measure
from bench.targets import DISPATCH, targets
from streams.clock import SystemClock
from streams.domain.calendar import CLOSED_EVENT_REASONS
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.calendar.dispatch import CalendarReminderDispatcher, DispatchConfig
from streams.timers.context import RunContext

# Claim + transition + outbox insert for one batch, in a single statement: the reference.
# It does the same work as the real path: the same claim, Sent with SentAt or Skipped with
# the domain's skip reason (both passed in from streams.domain.calendar, not hard-coded),
# and one outbox row per Sent reminder with the same payload fields and a correlation header.
BARE = """
WITH c AS (
    SELECT r.reminder_id, r.event_id, r.offset_minutes, e.tenant_id, e.owner_user_id,
           e.client_user_id, e.kind, e.start_at, e.time_zone, e.status, e.appointment_id,
           s.reason
    FROM calendar.event_reminders r JOIN calendar.events e ON e.event_id = r.event_id
    LEFT JOIN unnest($3::text[], $4::text[]) AS s(status, reason) ON s.status = e.status
    WHERE r.status = 'Pending' AND r.due_at < $1
    ORDER BY r.due_at LIMIT $2
    FOR NO KEY UPDATE OF r SKIP LOCKED FOR SHARE OF e SKIP LOCKED
), u AS (
    UPDATE calendar.event_reminders r
    SET status = CASE WHEN c.reason IS NULL THEN 'Sent' ELSE 'Skipped' END,
        sent_at = CASE WHEN c.reason IS NULL THEN $1::timestamptz END,
        skip_reason = c.reason,
        updated_at = $1
    FROM c WHERE r.reminder_id = c.reminder_id
    RETURNING r.reminder_id
), o AS (
    INSERT INTO ops.outbox (topic, key, payload, headers)
    SELECT 'pin.calendar.reminder-due.v1', c.event_id::text,
           json_build_object('ContractVersion', 1, 'ReminderId', c.reminder_id,
               'EventId', c.event_id, 'TenantId', c.tenant_id, 'OwnerUserId', c.owner_user_id,
               'ClientUserId', c.client_user_id, 'Kind', c.kind, 'StartAt', c.start_at,
               'TimeZone', c.time_zone, 'OffsetMinutes', c.offset_minutes,
               'AppointmentId', c.appointment_id),
           jsonb_build_object('correlation-id', $5::text)
    FROM c WHERE c.reason IS NULL
    RETURNING 1
)
SELECT (SELECT count(*) FROM u) AS n
"""
CLOSED = [s.value for s in CLOSED_EVENT_REASONS]
REASONS = list(CLOSED_EVENT_REASONS.values())


async def bare(url: str, as_of: datetime, batch: int) -> tuple[int, float]:
    conn = await asyncpg.connect(url)
    try:
        total = 0
        t = time.perf_counter()
        while True:
            async with conn.transaction():
                n = await conn.fetchval(BARE, as_of, batch, CLOSED, REASONS, uuid.uuid4().hex[:12])
            total += n
            if n < batch:
                break
        return total, time.perf_counter() - t
    finally:
        await conn.close()


async def real(url: str, as_of: datetime, batch: int) -> tuple[int, float]:
    runtime = Runtime(
        Settings(database_url=url, db_pool_min_size=1, db_pool_max_size=2), clock=SystemClock()
    )
    dispatcher = CalendarReminderDispatcher(runtime, DispatchConfig(batch_size=batch))
    try:
        await runtime.pool()
        t = time.perf_counter()
        result = await dispatcher.run_once(
            RunContext.at(as_of, clock=dispatcher.clock, budget=timedelta(hours=1))
        )
        return result.sent_count, time.perf_counter() - t
    finally:
        await runtime.close()


QUICK = {"rows": 8_000}


async def run(rows: int = 200_000, batch: int = 200) -> list[Measure]:
    print(f"\n== dispatch throughput: {rows:,} due rows, batch {batch} ==")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    async with database(prefix="bench_seed") as seed_url:
        t = time.perf_counter()
        n = await seed_reminders(seed_url, events=rows // 4, offsets=[60, 45, 30, 15], start=start)
        print(f"  seeded {n:,} due rows in {time.perf_counter() - t:.1f} s")
        seed = seed_url.rsplit("/", 1)[1]
        # Both contenders get a byte-identical copy; no connection may stay on the template.
        await admin(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{seed}'"
        )
        as_of = start + timedelta(days=1)
        figures: dict[str, float] = {}
        for name, contender in (
            ("bare SQL statement", bare),
            ("real dispatcher", real),
            ("bare SQL statement (2nd)", bare),
            ("real dispatcher (2nd)", real),
        ):
            async with database(template=seed) as url:
                sent, seconds = await contender(url, as_of, batch)
                assert sent == n, f"{name} sent {sent} of {n}"
                figures[name] = sent / seconds
                print(
                    f"  {name:<26} {sent:>8,} rows in {seconds:6.2f} s = {sent / seconds:>9,.0f} rows/s"
                )
        ref = max(figures["bare SQL statement"], figures["bare SQL statement (2nd)"])
        ours = max(figures["real dispatcher"], figures["real dispatcher (2nd)"])
        print(f"  ratio real/bare (best of 2 each) = {ours / ref:.2f}   (target >= 0.8)")
        scale = await processes(seed, as_of, batch, n)
    detail = f"{n:,} due rows, batch {batch}, best of 2 each"
    return [
        measure(
            "dispatch: dispatcher vs bare SQL",
            "rows/s",
            ours,
            ref,
            targets=targets(DISPATCH),
            bench="dispatch",
            detail=detail + "; reference: one bare SQL statement per batch",
        ),
        *scale,
    ]


async def processes(seed: str, as_of: datetime, batch: int, n: int) -> list[Measure]:
    """Two processes running the dispatcher over the same due rows vs one (informational)."""
    rates: dict[int, float] = {}
    cpu: dict[int, PerEvent] = {}
    for count in (1, 2):
        async with database(template=seed) as url:
            sent, seconds, cpu[count] = await run_processes(url, as_of, batch, count)
            assert sent == n, f"{count} process(es) sent {sent} of {n}"
            rates[count] = sent / seconds
            print(
                f"  dispatcher in {count} process(es)     {sent:>8,} rows in {seconds:6.2f} s "
                f"= {rates[count]:>9,.0f} rows/s"
            )
            print(f"    {cpu[count].text('dispatcher')}")
    print(f"  ratio two processes / one = {rates[2] / rates[1]:.2f}   (reported)")
    return [
        measure(
            "dispatch: two processes vs one",
            "rows/s",
            rates[2],
            rates[1],
            bench="dispatch",
            detail=f"{n:,} due rows, batch {batch}; reference: the same in one process",
        ),
        *scale_measures("dispatch", "dispatcher", cpu[1], cpu[2], f"{n:,} due rows, batch {batch}"),
    ]
