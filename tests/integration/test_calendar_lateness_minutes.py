"""The calendar card's lateness from the ledger (``event_reminders_lateness_minutes``):
Sent reminders per minute of DueAt with the p95 / max of SentAt - DueAt, only Sent rows in
the window, the row bound, and the plan on the console's partial index."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from db import event_reminders as repo
from db.queries import sql
from devkit.harness.console import event, reminder

pytestmark = pytest.mark.integration

UNTIL = datetime(2026, 12, 3, 16, 30, 20, tzinfo=UTC)
MINUTE = UNTIL.replace(second=0)
SINCE = MINUTE - timedelta(minutes=59)


async def sent(conn: asyncpg.Connection, event_id: uuid.UUID, due: datetime, late: float) -> None:
    reminder_id = await reminder(conn, event_id, due, "Sent")
    await conn.execute(
        "UPDATE calendar.event_reminders SET sent_at = due_at + $2 * interval '1 s'"
        " WHERE reminder_id = $1",
        reminder_id,
        late,
    )


async def test_lateness_per_minute_of_due_time(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        ev = await event(conn, uuid.uuid4(), uuid.uuid4())
        ten = MINUTE - timedelta(minutes=10)
        # Five due in minute -10 (a second apart: one row per event, offset and due time),
        # one of them sent 90 s late.
        for i, late in enumerate((0.1, 0.2, 0.3, 0.4, 90.0)):
            await sent(conn, ev, ten + timedelta(seconds=i), late)
        await sent(conn, ev, MINUTE - timedelta(hours=2), 1.0)  # due before the hour
        await reminder(conn, ev, ten + timedelta(seconds=30), "Pending")  # not sent yet
        await reminder(conn, ev, ten + timedelta(seconds=40), "Skipped")
        rows = await repo.lateness_minutes(conn, SINCE, UNTIL, 1000)
        assert [r.minute for r in rows] == [ten]
        assert rows[0].sent == 5
        assert rows[0].lateness_max_seconds == pytest.approx(90.0)
        assert 0.4 < (rows[0].lateness_p95_seconds or 0) < 90.0
        capped = await repo.lateness_minutes(conn, SINCE, UNTIL, 2)
        assert sum(r.sent for r in capped) == 2  # at most the bound is read
    finally:
        await conn.close()


async def test_the_statement_reads_the_hour_through_the_partial_index(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        ev = await event(conn, uuid.uuid4(), uuid.uuid4())
        await conn.execute(
            "INSERT INTO calendar.event_reminders (reminder_id, event_id, offset_minutes, due_at,"
            " status, sent_at, next_attempt_at)"
            " SELECT gen_random_uuid(), $1, i, $2::timestamptz - i * interval '1 s',"
            " CASE WHEN i % 10 = 0 THEN 'Pending' ELSE 'Sent' END,"
            " CASE WHEN i % 10 = 0 THEN NULL ELSE $2::timestamptz END, '-infinity'"
            " FROM generate_series(1, 50000) i",
            ev,
            UNTIL,
        )
        await conn.execute("ANALYZE calendar.event_reminders")
        plan = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + sql("event_reminders_lateness_minutes"), SINCE, UNTIL, 1000
        )
        text = json.dumps(json.loads(plan) if isinstance(plan, str) else plan)
        assert "ix_event_reminders_console_done" in text
        assert '"Seq Scan"' not in text
    finally:
        await conn.close()
