"""The console's page time on a 10M-row table: ``python -m bench.console_pages [ROWS]``
(``make bench-console``; not part of ``make bench``: the fill alone takes minutes).

Fills calendar.event_reminders of a throwaway database with ROWS reminders (default
10,000,000) of 100,000 events of 100 tenants in one INSERT ... SELECT over generate_series:
90% Sent, 5% Skipped, 5% Pending (one row in 10,000 of the table retrying after a failed
attempt), due a second apart; the secondary indexes are built after the fill (as fast as
PostgreSQL builds them), then VACUUM (ANALYZE), as autovacuum leaves a table. Then for the first page, a page deep in the
table (cursor 100 rows before its end), a window with an owner (and tenant) filter, an owner
with no event, and the capped counts
of /console/rows: EXPLAIN (ANALYZE, BUFFERS) of the named statement with the page's
parameters (custom plan) and with plan_cache_mode = force_generic_plan (what a prepared
statement may switch to after five runs), and the median of 20 runs of the console's own
page function (streams/console/rows.py: the statement, one row more for the next cursor, the
JSON-able rows).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import asyncpg

from bench.common import database
from bench.progress import spin
from db.queries import sql
from devkit.harness.calendar import make_runtime
from streams.console import rows
from streams.console.listing import encode_cursor

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EVENTS = 100_000
TENANTS = 100
RUNS = 20

EVENTS_SEED = """
INSERT INTO calendar.events (event_id, tenant_id, owner_user_id, kind, start_at, time_zone,
                             status, version, occurred_at)
SELECT gen_random_uuid(),
       ('00000000-0000-4000-8000-' || lpad(to_hex(g % $2), 12, '0'))::uuid,
       gen_random_uuid(), 'Meeting', $1::timestamptz, 'UTC', 'Planned', 1, $1::timestamptz
FROM generate_series(1, $3::int) AS g
"""
# Reminder g: event g mod EVENTS, due T0 + g seconds; status by g mod 20 (Pending, Skipped,
# else Sent); one Pending row in 10,000 has a failed attempt (retrying).
REMINDERS_SEED = """
WITH ev AS (SELECT array_agg(event_id ORDER BY event_id) AS ids FROM calendar.events)
INSERT INTO calendar.event_reminders (reminder_id, event_id, offset_minutes, due_at, status,
    sent_at, skip_reason, created_at, updated_at, attempts, next_attempt_at, last_error_code)
SELECT gen_random_uuid(), ev.ids[1 + g % $2], 15, d,
       s, CASE WHEN s = 'Sent' THEN d END, CASE WHEN s = 'Skipped' THEN 'EventCancelled' END,
       d - interval '1 day', d,
       CASE WHEN g % 10000 = 0 THEN 1 ELSE 0 END,
       CASE WHEN g % 10000 = 0 THEN d + interval '1 hour' ELSE '-infinity' END,
       CASE WHEN g % 10000 = 0 THEN 'InvalidReminder' END
FROM ev, generate_series(1, $3::bigint) AS g,
     LATERAL (SELECT $1::timestamptz + make_interval(secs => g) AS d,
                     CASE g % 20 WHEN 0 THEN 'Pending' WHEN 1 THEN 'Skipped'
                          ELSE 'Sent' END AS s) x
"""


async def fill(url: str, n: int) -> float:
    conn = await asyncpg.connect(url, command_timeout=3600)
    try:
        started = time.perf_counter()
        indexes = await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'calendar' "
            "AND tablename = 'event_reminders' AND indexname <> 'event_reminders_pkey' "
            "AND indexname <> 'ux_event_reminders_identity'"
        )
        for ix in indexes:
            await conn.execute(f"DROP INDEX calendar.{ix['indexname']}")
        await spin(f"  {EVENTS:,} events", conn.execute(EVENTS_SEED, T0, TENANTS, EVENTS))
        # The foreign key to the events is checked per row otherwise (a trigger): the rows
        # are made from the events table itself.
        await conn.execute("SET session_replication_role = replica")
        await spin(f"  {n:,} reminders", conn.execute(REMINDERS_SEED, T0, EVENTS, n))
        await conn.execute("SET session_replication_role = DEFAULT")
        for ix in indexes:
            await spin(f"  index {ix['indexname']}", conn.execute(ix["indexdef"]))
        await spin("  VACUUM (ANALYZE)", conn.execute("VACUUM (ANALYZE) calendar.event_reminders"))
        await conn.execute("VACUUM (ANALYZE) calendar.events")
        return time.perf_counter() - started
    finally:
        await conn.close()


async def explain(conn: asyncpg.Connection, name: str, args: tuple[Any, ...]) -> None:
    statement = sql(name)
    for mode in ("custom", "generic"):
        async with conn.transaction():
            if mode == "generic":
                await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            plan = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {statement}", *args)
        print(f"  -- {name}, {mode} plan:")
        for line in plan:
            print("     " + line[0])


async def median_ms(call: Callable[[], Awaitable[Any]]) -> float:
    times = []
    for _ in range(RUNS):
        t = time.perf_counter()
        await call()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


async def run(n: int = 10_000_000) -> None:
    print(f"\n== console pages: calendar.event_reminders with {n:,} rows ==")
    async with database(prefix="bench_console") as url:
        seconds = await fill(url, n)
        conn = await asyncpg.connect(url)
        runtime = make_runtime(url)
        try:
            size = await conn.fetchval(
                "SELECT pg_size_pretty(pg_total_relation_size('calendar.event_reminders'))"
            )
            by_state = await conn.fetch(
                "SELECT status, count(*) AS n FROM calendar.event_reminders GROUP BY 1 ORDER BY 1"
            )
            print(f"  filled in {seconds:.0f} s; table with its indexes: {size}")
            print("  rows: " + ", ".join(f"{r['status']} {r['n']:,}" for r in by_state))
            deep = await conn.fetchrow(
                "SELECT due_at, reminder_id FROM calendar.event_reminders WHERE status = 'Sent' "
                "ORDER BY due_at DESC, reminder_id DESC OFFSET 100 LIMIT 1"
            )
            listing = rows.find("calendar/reminders")
            tenant = "00000000-0000-4000-8000-000000000007"
            owner = str(
                await conn.fetchval(
                    "SELECT owner_user_id FROM calendar.events WHERE tenant_id = $1 LIMIT 1",
                    UUID(tenant),
                )
            )
            window_from = T0 + timedelta(seconds=n // 2)
            window = {
                "from": window_from.isoformat(),
                "to": (T0 + timedelta(seconds=n)).isoformat(),
            }
            cases: dict[str, dict[str, str]] = {
                "first page (Sent)": {"state": "Sent"},
                "first page (Pending)": {"state": "Pending"},
                "deep page (Sent, cursor 100 rows before the end)": {
                    "state": "Sent",
                    "after": encode_cursor(deep["due_at"], deep["reminder_id"]),
                },
                "filtered page (Sent, second half of the window, one owner of a tenant)": {
                    "state": "Sent",
                    "tenant": tenant,
                    "owner": owner,
                    **window,
                },
                "an owner with no event (Sent)": {"state": "Sent", "owner": str(uuid4())},
            }
            figures = []
            for label, params in cases.items():
                q = listing.query(params)
                args: tuple[Any, ...] = (*q.bound, q.end, q.limit + 1, q.tenant, q.owner)
                name = "event_reminders_console_pending"
                if q.owner is not None:
                    name, args = "event_reminders_console_by_owner", (*args, q.state, False)
                elif q.state != "Pending":
                    name, args = "event_reminders_console_done", (*args, q.state)
                print(f"\n  {label}: {params}")
                await explain(conn, name, args)
                page = await rows.page(runtime, listing, params)
                ms = await median_ms(lambda p=params: rows.page(runtime, listing, p))  # type: ignore[misc]
                figures.append((label, len(page["rows"]), ms))
            print("\n  counts by state (/console/rows, each capped at 10,000):")
            await explain(conn, "event_reminders_console_counts", (rows.COUNT_CAP,))
            ms = await median_ms(lambda: rows.index(runtime))
            figures.append(("counts of every listing (/console/rows)", 0, ms))
            print(f"\n  median of {RUNS} runs of the console's page function:")
            for label, count, ms in figures:
                print(f"    {label:<70} {count:>3} rows  {ms:8.2f} ms")
        finally:
            await runtime.close()
            await conn.close()


if __name__ == "__main__":
    asyncio.run(run(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000))
