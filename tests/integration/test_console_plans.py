"""A console page is one index range: on a table of 60,000 analyzed reminders, the first page
and a page deep in the table (5,000 rows before its end) read the page's rows and no more
from calendar.event_reminders, on the custom and on the generic plan (what a prepared
statement switches to), for every state's statement. (Nearer the end the planner may sort
the few rows left instead: as cheap.) (The page times on 10M rows: python -m bench.console_pages, docs/benchmarks.md.)"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from db.queries import sql
from devkit.harness.console import T0
from streams.console import rows
from streams.console.listing import encode_cursor

pytestmark = pytest.mark.integration

ROWS = 60_000
SEED = """
WITH ev AS (
    INSERT INTO calendar.events (event_id, tenant_id, owner_user_id, kind, start_at,
                                 time_zone, status, version, occurred_at)
    SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'Meeting', $1, 'UTC',
           'Planned', 1, $1
    FROM generate_series(1, 1000)
    RETURNING event_id
), ids AS (SELECT array_agg(event_id) AS a FROM ev)
INSERT INTO calendar.event_reminders (reminder_id, event_id, offset_minutes, due_at, status,
                                      sent_at, attempts, next_attempt_at)
SELECT gen_random_uuid(), ids.a[1 + g % 1000], 15, $1 + make_interval(secs => g),
       CASE g % 3 WHEN 0 THEN 'Pending' WHEN 1 THEN 'Sent' ELSE 'Skipped' END,
       CASE WHEN g % 3 = 1 THEN $1 + make_interval(secs => g) END,
       CASE WHEN g % 1000 = 0 THEN 1 ELSE 0 END,
       CASE WHEN g % 1000 = 0 THEN $1 + make_interval(secs => g) ELSE '-infinity' END
FROM ids, generate_series(1, $2::int) AS g
"""
STATEMENTS = {
    "Pending": "event_reminders_console_pending",
    "Sent": "event_reminders_console_done",
    "Skipped": "event_reminders_console_done",
}


def reminder_rows_read(plan: Any) -> tuple[int, list[str]]:
    """Rows the plan's scans of calendar.event_reminders returned, and its node types."""
    found, nodes, stack = 0, [], [plan]
    while stack:
        node = stack.pop()
        nodes.append(node["Node Type"])
        if node.get("Relation Name") == "event_reminders":
            found += int(node["Actual Rows"]) * int(node.get("Actual Loops", 1))
        stack.extend(node.get("Plans", []))
    return found, nodes


async def test_first_and_deep_pages_read_only_their_rows_on_either_plan(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        await conn.execute(SEED, T0, ROWS)
        await conn.execute("ANALYZE calendar.event_reminders; ANALYZE calendar.events")
        listing = rows.find("calendar/reminders")
        for state, name in STATEMENTS.items():
            deep = await conn.fetchrow(
                "SELECT due_at, reminder_id FROM calendar.event_reminders WHERE status = $1 "
                "ORDER BY due_at DESC, reminder_id DESC OFFSET 5000 LIMIT 1",
                state,
            )
            for label, params in (
                ("first", {"state": state}),
                ("deep", {"state": state, "after": encode_cursor(*deep)}),
            ):
                q = listing.query(params)
                args: tuple[Any, ...] = (*q.bound, q.end, q.limit + 1, q.tenant, q.owner)
                if name.endswith("_done"):
                    args = (*args, state)
                for mode in ("auto", "force_generic_plan"):
                    async with conn.transaction():
                        await conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
                        out = await conn.fetchval(
                            f"EXPLAIN (ANALYZE, FORMAT JSON) {sql(name)}", *args
                        )
                    read, nodes = reminder_rows_read(json.loads(out)[0]["Plan"])
                    what = f"{state} {label} page, {mode}: {nodes}"
                    assert read == q.limit + 1, what
                    assert "Sort" not in nodes, what


SCHEDULER_SEED = """
INSERT INTO automation.scheduler (automation_type_id, trigger_type_id, scheduler_key,
                                  scheduled_on, status_id, input_hash)
SELECT 'Reminder', 'DateBased', 'reminder:' || g, $1::timestamptz + make_interval(secs => g),
       CASE g % 3 WHEN 0 THEN 'Pending' WHEN 1 THEN 'Completed' ELSE 'Deactivated' END,
       repeat('0', 64)
FROM generate_series(1, $2::int) AS g
"""


def scheduler_rows_read(plan: Any) -> tuple[int, list[str]]:
    found, nodes, stack = 0, [], [plan]
    while stack:
        node = stack.pop()
        nodes.append(node["Node Type"])
        if node.get("Relation Name") == "scheduler":
            found += int(node["Actual Rows"]) * int(node.get("Actual Loops", 1))
        stack.extend(node.get("Plans", []))
    return found, nodes


async def test_scheduler_pages_read_only_their_rows_on_either_plan(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        await conn.execute(SCHEDULER_SEED, T0, ROWS)
        await conn.execute("ANALYZE automation.scheduler")
        listing = rows.find("automation/scheduler")
        for state in ("Pending", "Completed"):
            deep = await conn.fetchrow(
                "SELECT scheduled_on, scheduler_id FROM automation.scheduler "
                "WHERE status_id = $1 ORDER BY 1 DESC, 2 DESC OFFSET 5000 LIMIT 1",
                state,
            )
            for params in ({"state": state}, {"state": state, "after": encode_cursor(*deep)}):
                q = listing.query(params)
                args = (*q.bound, q.end, q.limit + 1, state)
                for mode in ("auto", "force_generic_plan"):
                    async with conn.transaction():
                        await conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
                        out = await conn.fetchval(
                            f"EXPLAIN (ANALYZE, FORMAT JSON) {sql('scheduler_console_page')}",
                            *args,
                        )
                    read, nodes = scheduler_rows_read(json.loads(out)[0]["Plan"])
                    assert read == q.limit + 1, f"{params}, {mode}: {nodes}"
                    assert "Sort" not in nodes, f"{params}, {mode}: {nodes}"


class Explaining:
    """A connection for a listing's page function: EXPLAIN ANALYZE of what it would fetch."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.plans: list[str] = []

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        self.plans.append(
            await self.conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}", *args)
        )
        return []


def scheduler_rows_examined(plan: Any) -> int:
    """Rows the plan's scans of automation.scheduler looked at: returned plus filtered out."""
    found, stack = 0, [plan]
    while stack:
        node = stack.pop()
        if node.get("Relation Name") == "scheduler":
            seen = int(node["Actual Rows"]) + int(node.get("Rows Removed by Filter", 0))
            found += seen * int(node.get("Actual Loops", 1))
        stack.extend(node.get("Plans", []))
    return found


async def test_scheduler_filters_that_match_nothing_probe_an_index_not_the_state(
    pool: asyncpg.Pool,
) -> None:
    """A business unit or key prefix matching nothing used to read every row of the state (the
    filters were checked row by row: 1.24 s per request at 1M Completed rows). Now each is
    one index range; a prefix matching every row reads the page's rows off the state's index.
    As rows.page runs them: planned for their values."""
    async with pool.acquire() as conn:
        await conn.execute(SCHEDULER_SEED, T0, ROWS)
        await conn.execute("ANALYZE automation.scheduler")
        listing = rows.find("automation/scheduler")
        cases = (
            ({"bu": "cccccccc-0000-4000-8000-000000000003"}, 0),
            ({"key_prefix": "nothing-like-this:"}, 0),
            ({"key_prefix": "reminder:"}, None),  # every row: at most a page's worth read
            ({"bu": "cccccccc-0000-4000-8000-000000000003", "key_prefix": "reminder:"}, 0),
        )
        for params, most in cases:
            for state in ("Pending", "Completed"):
                q = listing.query({"state": state, **params})
                explaining = Explaining(conn)
                await listing.page(explaining, q)
                [out] = explaining.plans
                examined = scheduler_rows_examined(json.loads(out)[0]["Plan"])
                assert examined <= (q.limit + 1 if most is None else most), (params, state, out)
