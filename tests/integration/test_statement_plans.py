"""Batch statements are planned for their batch: appliers never run them on a generic plan.

A generic plan cannot see that ``unnest($1::uuid[])`` holds one batch of keys. For the calendar
batch statement it reads every Pending reminder of the table to find the few of the batch's
events (a hash join over all of them) - slower with every batch as the table grows, which is
what the ingest bench showed until this was found (docs/benchmarks.md).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from db.connector import Connection, connect, create_pool, transaction
from devkit.messages.factories import T0, calendar_event, parsed
from streams.input.applier import Origin
from streams.slices.calendar.events import CalendarEventsWriter

pytestmark = pytest.mark.integration

PENDING = 30_000  # reminder rows already stored (2 per event)


def events(n: int) -> list[Any]:
    return [parsed(calendar_event(StartAt=T0 + timedelta(days=2, seconds=i))) for i in range(n)]


async def write(conn: asyncpg.Connection, batch: list[Any]) -> int:
    """Write one batch as the worker's writer does, in the transaction it is given; the rows of
    calendar.event_reminders the batch statement's scans returned (auto_explain's plan of the
    statement as it ran, sent back as a notice)."""
    plans: list[Any] = []

    def listen(_conn: Connection, message: Any) -> None:
        text = str(message.message)
        if "plan:" in text:
            plans.append(json.loads(text.split("plan:", 1)[1]))

    conn.add_log_listener(listen)
    try:
        await apply(conn, batch)
    finally:
        conn.remove_log_listener(listen)
    statement = [p for p in plans if "calendar.events AS e" in p["Query Text"]]
    assert len(statement) == 1, "the batch statement's plan was not reported"
    return reminder_rows_read(statement[0]["Plan"])


async def apply(conn: asyncpg.Connection, batch: list[Any]) -> None:
    """The worker's calendar writer on one batch, in the transaction it is given."""
    origins = {str(e.event_id): Origin(0, i) for i, e in enumerate(batch)}
    writer = CalendarEventsWriter()
    fingerprints = {writer.key(e): writer.fingerprint(e) for e in batch}
    await writer.write(conn, batch, [], T0, origins, fingerprints)


async def explained(conn: asyncpg.Connection) -> None:
    """Send this session the plan of each statement as it ran (needs a superuser, as the test
    stack's role is)."""
    await conn.execute(
        "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;"
        " SET auto_explain.log_analyze = on; SET auto_explain.log_format = json;"
        " SET auto_explain.log_level = notice"
    )


def reminder_rows_read(plan: Any) -> int:
    """Rows the plan's scans of calendar.event_reminders returned (EXPLAIN ANALYZE JSON)."""
    found = 0
    stack = [plan]
    while stack:
        node = stack.pop()
        if node.get("Relation Name") == "event_reminders" and "Scan" in node["Node Type"]:
            found += int(node["Actual Rows"]) * int(node.get("Actual Loops", 1))
        stack.extend(node.get("Plans", []))
    return found


async def test_a_batch_transaction_plans_its_statements_for_the_batch(database_url: str) -> None:
    # One connection, as the worker's applier uses it: transaction(plan_for_parameters=True).
    pool = await create_pool(database_url, min_size=1, max_size=1)
    generic = await connect(database_url)
    try:
        # What a session can end up with otherwise: a generic plan, made while the table is
        # small and kept while it grows.
        # Kept until the table's statistics change: an autovacuum ANALYZE in the middle of
        # the test would have the session plan again with the grown table (seen in CI).
        for table in ("calendar.events", "calendar.event_reminders"):
            await generic.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
        await explained(generic)
        await generic.execute("SET plan_cache_mode = force_generic_plan")
        async with generic.transaction():
            await write(generic, events(5))
        stored = events(PENDING // 2)
        for i in range(0, len(stored), 500):  # the same statement, many times
            async with transaction(pool, plan_for_parameters=True) as conn:
                await explained(conn)
                await write(conn, stored[i : i + 500])
        pending = "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Pending'"
        assert await generic.fetchval(pending) == PENDING + 10

        async with transaction(pool, plan_for_parameters=True) as conn:
            await explained(conn)
            planned_for_batch = await write(conn, events(5))
        async with generic.transaction():
            kept_generic = await write(generic, events(5))
    finally:
        await generic.close()
        await pool.close()

    # Planned for its five new events, the batch reads next to none of the stored reminders.
    # The kept generic plan read every one of them (millions, in production) until the
    # statement's retention guard (migration 0024: tombstones, prune horizon) lowered the
    # generic estimate of stored events enough for it to probe by index as well; it stays one
    # estimate away from the full read, so the appliers keep planning for the batch.
    assert planned_for_batch < 50
    assert kept_generic < PENDING


FOREIGN_KEY_CHECK = """
SELECT coalesce(sum(s.calls), 0)::int AS calls, coalesce(sum(s.plans), 0)::int AS plans
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = current_database() AND s.query LIKE '%FOR KEY SHARE OF%'
"""


async def test_a_batch_plans_its_statement_not_each_foreign_key_check(database_url: str) -> None:
    # The reminders a batch inserts are checked against calendar.events (their foreign key),
    # one query per row inside PostgreSQL. Planning the batch statement for its batch must
    # not plan that query again for every row: `SET LOCAL plan_cache_mode =
    # force_custom_plan` did, 21 µs of PostgreSQL CPU per ingested event (docs/benchmarks.md).
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        stored = events(300)
        for i in range(0, len(stored), 100):
            async with transaction(pool, plan_for_parameters=True) as conn:
                # Count the queries PostgreSQL runs inside statements (superuser settings, as
                # the test stack's role is).
                await conn.execute(
                    "SET LOCAL pg_stat_statements.track = 'all';"
                    " SET LOCAL pg_stat_statements.track_planning = on"
                )
                await apply(conn, stored[i : i + 100])
        async with pool.acquire() as conn:
            checks = await conn.fetchrow(FOREIGN_KEY_CHECK)
            reminders = await conn.fetchval("SELECT count(*) FROM calendar.event_reminders")
    finally:
        await pool.close()
    assert reminders == 600
    assert checks["calls"] == reminders, "the foreign key checks were not counted"
    # A cached query is planned for its first five runs, then its generic plan is kept.
    assert checks["plans"] <= 6, f"planned {checks['plans']} times for {reminders} checks"
