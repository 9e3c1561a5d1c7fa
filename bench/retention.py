"""Retention against the production rate: rows/s one run deletes from the outbox (published
rows past the horizon) and from calendar (events past theirs, with their reminders), with the
production job, its batch size and its transactions. The lateness bench writes 1,000 outbox
rows/s (1,000 reminders coming due each second), so retention must delete at least 10,000
rows/s to keep up with a backlog and the day's production at once.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import asyncpg

from bench.common import database
from bench.progress import spin
from bench.report import Measure, Target, measure
from db.connector import create_pool
from streams.clock import SystemClock
from streams.maintenance import (
    OutboxRetention,
    RetentionConfig,
    RetentionMetrics,
    TableRetention,
    TableRetentionConfig,
)
from streams.metrics import Metrics
from streams.timers.context import RunContext

PRODUCTION_ROWS_PER_SECOND = 1_000  # the lateness bench's outbox rows (due reminders) a second
QUICK = {"outbox_rows": 50_000, "events": 10_000}

# Rows like the relay leaves them: a ReminderDueEvent payload (~350 bytes), headers, lane,
# published with coordinates.
OUTBOX_SEED = """
INSERT INTO ops.outbox (topic, key, payload, headers, created_at, published_at,
                        published_partition, published_offset)
SELECT 'pin.calendar.reminder-due.v1', gen_random_uuid()::text,
       json_build_object('ReminderId', gen_random_uuid(), 'EventId', gen_random_uuid(),
                         'Pad', repeat('x', 250)),
       '{"outbox-id": "1", "content-type": "application/json"}'::jsonb,
       $1::timestamptz + make_interval(secs => g / 1000.0),
       $1::timestamptz + make_interval(secs => g / 1000.0),
       0, g
FROM generate_series(1, $2::bigint) AS g
"""
# Events started before $1 with two reminders each, both Sent.
EVENTS_SEED = """
WITH ev AS (
    INSERT INTO calendar.events (event_id, tenant_id, owner_user_id, kind, start_at,
        time_zone, status, reminder_offsets_minutes, version, occurred_at)
    SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'Meeting',
           $1::timestamptz + make_interval(secs => g / 100.0), 'UTC', 'Completed', '{15,60}', 3,
           $1::timestamptz - interval '1 day'
    FROM generate_series(1, $2::bigint) AS g
    RETURNING event_id, start_at
)
INSERT INTO calendar.event_reminders (reminder_id, event_id, offset_minutes, due_at, status,
                                      sent_at)
SELECT gen_random_uuid(), ev.event_id, o, ev.start_at - make_interval(mins => o), 'Sent',
       ev.start_at - make_interval(mins => o)
FROM ev CROSS JOIN (VALUES (15), (60)) AS offs(o)
"""


async def _seed(url: str, statement: str, since: datetime, n: int, what: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await spin(f"  seeding {what}", conn.execute(statement, since, n))
        await spin("  VACUUM (ANALYZE)", conn.execute("VACUUM (ANALYZE)"))
    finally:
        await conn.close()


async def run(outbox_rows: int = 500_000, events: int = 100_000) -> list[Measure]:
    print(
        f"\n== retention: {outbox_rows:,} published outbox rows and {events:,} calendar events "
        f"(+{2 * events:,} reminders) past their horizon =="
    )
    as_of = datetime(2026, 6, 1, tzinfo=UTC)
    target = 10 * PRODUCTION_ROWS_PER_SECOND
    async with database() as url:
        await _seed(url, OUTBOX_SEED, as_of - timedelta(days=3), outbox_rows, "outbox rows")
        pool = await create_pool(url, min_size=1, max_size=2)
        try:
            metrics = Metrics()
            job = OutboxRetention(
                pool,
                metrics=metrics.outbox,
                config=RetentionConfig(),
                retention_metrics=metrics.family(RetentionMetrics),
            )
            t = time.perf_counter()
            out = await job.run_once(RunContext.at(as_of, clock=SystemClock()))
            outbox_seconds = time.perf_counter() - t
        finally:
            await pool.close()
    outbox_rate = out.deleted / outbox_seconds
    print(
        f"  outbox: {out.deleted:,} rows in {outbox_seconds:.2f} s, {out.chunks} transactions "
        f"of <= {RetentionConfig().chunk_size:,}: {outbox_rate:,.0f} rows/s "
        f"({outbox_rate / PRODUCTION_ROWS_PER_SECOND:.0f}x the production {PRODUCTION_ROWS_PER_SECOND:,}/s)"
    )
    async with database() as url:
        await _seed(url, EVENTS_SEED, as_of - timedelta(days=60), events, "calendar events")
        pool = await create_pool(url, min_size=1, max_size=2)
        try:
            metrics = Metrics()
            tables = TableRetention(
                pool, metrics=metrics.family(RetentionMetrics), config=TableRetentionConfig()
            )
            t = time.perf_counter()
            res = await tables.run_once(RunContext.at(as_of, clock=SystemClock()))
            calendar_seconds = time.perf_counter() - t
        finally:
            await pool.close()
    calendar_rows = res.deleted["calendar.events"] + res.deleted["calendar.event_reminders"]
    calendar_rate = calendar_rows / calendar_seconds
    print(
        f"  calendar: {res.deleted['calendar.events']:,} events + "
        f"{res.deleted['calendar.event_reminders']:,} reminders (tombstones written) in "
        f"{calendar_seconds:.2f} s: {calendar_rate:,.0f} rows/s"
    )
    return [
        measure(
            "retention: outbox rows deleted/s",
            "rows/s",
            outbox_rate,
            PRODUCTION_ROWS_PER_SECOND,
            targets=[Target(">=", 10, on="ratio")],
            bench="retention",
            detail=f"{out.deleted:,} rows, one run; reference: the production rate "
            f"(lateness bench, {PRODUCTION_ROWS_PER_SECOND:,}/s); target {target:,}/s",
        ),
        measure(
            "retention: calendar rows deleted/s",
            "rows/s",
            calendar_rate,
            PRODUCTION_ROWS_PER_SECOND,
            targets=[Target(">=", 10, on="ratio")],
            bench="retention",
            detail=f"{events:,} events + their {2 * events:,} reminders, one run, tombstones "
            f"written; reference: {PRODUCTION_ROWS_PER_SECOND:,} rows/s",
        ),
    ]
