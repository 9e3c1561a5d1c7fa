"""The overview's charts from ops.outbox (``outbox_minutes``): written, published and waits per
topic and minute, the backlog per minute, the row bound, and the plan on the two indexes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from db import outbox as repo
from db.queries import sql
from streams.console.activity import buckets

pytestmark = pytest.mark.integration

UNTIL = datetime(2026, 12, 3, 16, 30, 20, tzinfo=UTC)
MINUTE = UNTIL.replace(second=0)
A, B = "x.pin.calendar.reminder-due.v1", "x.pin.automation.dispatch-requested.v1"


async def insert(
    conn: asyncpg.Connection, topic: str, created: datetime, published: datetime | None
) -> None:
    await conn.execute(
        "INSERT INTO ops.outbox (topic, key, payload, created_at, published_at)"
        " VALUES ($1, 'k', '{}', $2, $3)",
        topic,
        created,
        published,
    )


async def test_written_published_waits_and_backlog_per_minute(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        ten = MINUTE - timedelta(minutes=10)
        for wait in (0.1, 0.2, 0.3, 0.4, 4.0):  # five sent in minute -10, one slow
            await insert(conn, A, ten, ten + timedelta(seconds=wait))
        await insert(conn, A, ten, None)  # still waiting
        old = MINUTE - timedelta(hours=2)
        await insert(conn, A, old, MINUTE - timedelta(minutes=5))  # written before the hour
        await insert(conn, A, old, old + timedelta(seconds=1))  # published before: not read
        await insert(conn, B, ten, ten + timedelta(seconds=1))  # another topic
        await insert(conn, "other.topic", ten, ten)  # not asked for
        since = MINUTE - timedelta(minutes=59)
        stats = await repo.minutes(conn, since, UNTIL, [A, B], 1000)
        assert {s.topic for s in stats} == {A, B}
        a = {s.minute: s for s in stats if s.topic == A}
        assert (a[ten].written, a[ten].published) == (6, 5)
        assert a[ten].wait_max_seconds == pytest.approx(4.0)
        assert 0.4 < (a[ten].wait_p95_seconds or 0) < 4.0
        assert a[since].written == 1  # the record written two hours ago, waiting at the start
        per_minute = buckets([s for s in stats if s.topic == A], UNTIL)
        backlog = {m["minute"]: m["backlog"] for m in per_minute}
        assert backlog[since.isoformat()] == 1
        assert backlog[ten.isoformat()] == 2
        assert backlog[(MINUTE - timedelta(minutes=5)).isoformat()] == 1
        assert per_minute[-1]["backlog"] == 1  # the one still waiting
        # The bound: at most that many published rows are read, the newest.
        capped = await repo.minutes(conn, since, UNTIL, [A], 2)
        assert sum(s.published for s in capped) == 2
    finally:
        await conn.close()


async def test_the_statement_reads_the_hour_through_its_indexes(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "INSERT INTO ops.outbox (topic, key, payload, created_at, published_at)"
            " SELECT $1, 'k' || i, '{}', $2::timestamptz - i * interval '1 s', $2::timestamptz - i * interval '1 s'"
            " FROM generate_series(1, 50000) i",
            A,
            UNTIL,
        )
        await conn.execute("ANALYZE ops.outbox")
        since = MINUTE - timedelta(minutes=59)
        plan = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + sql("outbox_minutes"), since, UNTIL, [A], 1000
        )
        text = json.dumps(json.loads(plan) if isinstance(plan, str) else plan)
        assert "ix_outbox_published_at" in text
        assert "ix_outbox_unpublished" in text
        assert '"Seq Scan"' not in text
    finally:
        await conn.close()
