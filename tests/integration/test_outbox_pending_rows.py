"""The relay's read of a lane (``outbox_pending_get``): rows in id order with their headers
decoded. Rows of one writer's batch share a headers text; each row still gets a mapping of
its own."""

from __future__ import annotations

import json

import asyncpg
import pytest

from db import outbox as repo

pytestmark = pytest.mark.integration

TOPIC = "x.pin.calendar.reminder-due.v1"


async def test_rows_with_the_same_headers_text_get_equal_but_separate_headers(
    database_url: str,
) -> None:
    run = json.dumps({"correlation-id": "run-1", "event-type": "ReminderDueEvent"})
    other = json.dumps({"correlation-id": "run-2", "attempt": 3, "flags": {"a": True}})
    conn = await asyncpg.connect(database_url)
    try:
        key = "same-key"  # one key, so one lane
        ids = await repo.insert_many(
            conn, [TOPIC] * 3, [key] * 3, ['{"n": 1}', '{"n": 2}', '{"n": 3}'], [run, other, run]
        )
        lane = await conn.fetchval("SELECT lane FROM ops.outbox WHERE id = $1", ids[0])
        rows = await repo.pending_get(conn, [lane], 10)
    finally:
        await conn.close()
    assert [r.id for r in rows] == ids
    first, second, third = rows
    expected = {"correlation-id": "run-1", "event-type": "ReminderDueEvent"}
    assert first.headers == expected
    assert third.headers == expected
    # Values that are not strings go out as their JSON text.
    assert second.headers == {"correlation-id": "run-2", "attempt": "3", "flags": '{"a": true}'}
    first.headers["traceparent"] = "changed"
    assert "traceparent" not in third.headers
