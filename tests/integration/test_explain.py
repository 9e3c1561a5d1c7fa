"""explain on real PostgreSQL: a reminder's input message, row history and outbox record."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from unittest.mock import MagicMock

import asyncpg
import pytest

import db.outbox as outbox_repo
from devkit.harness.calendar import make_runtime
from devkit.messages.factories import T0, calendar_event, parsed
from streams.explain import explain
from streams.input.consumer import Decoded
from streams.runtime import Runtime
from streams.slices.calendar.dispatch import CalendarReminderDispatcher
from streams.slices.calendar.events import CalendarEventsApplier
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    yield rt
    await rt.close()


def read_at(msg: dict[str, Any], partition: int, offset: int) -> Decoded[Any]:
    event = MagicMock()
    event.message.partition, event.message.offset = partition, offset
    return Decoded(event, parsed(msg))


async def test_a_sent_reminder_explains_its_input_row_and_published_record(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    start = T0 + timedelta(hours=2)
    e = calendar_event(StartAt=start, ReminderOffsetsMinutes=[60])
    await CalendarEventsApplier(runtime)([read_at(e, 3, 41)])
    result = await CalendarReminderDispatcher(runtime).run_once(
        RunContext.at(start, clock=runtime.clock)
    )
    assert result.sent_count == 1
    # The relay's mark, as it would record Kafka's acknowledgement.
    outbox_id = await pool.fetchval("SELECT id FROM ops.outbox")
    await pool.execute(
        "UPDATE ops.outbox SET published_at = now(), published_partition = 2, "
        "published_offset = 1234 WHERE id = $1",
        outbox_id,
    )
    reminder_id = await pool.fetchval("SELECT reminder_id::text FROM calendar.event_reminders")
    found = await explain(runtime, reminder_id)
    assert found is not None and found["kind"] == "calendar reminder"
    assert found["input"]["partition"] == 3 and found["input"]["offset"] == 41
    assert found["input"]["version"] == 1
    assert [h["status"] for h in found["history"]] == ["Pending", "Sent"]
    assert found["dispatch"] == {"attempts": 0, "next_attempt_at": None, "last_error_code": None}
    [record] = found["outbox"]
    assert (record["outbox_id"], record["partition"], record["offset"]) == (outbox_id, 2, 1234)
    event = await explain(runtime, e["EventId"])
    assert event is not None and event["reminders"] == [reminder_id]
    assert event["input"]["offset"] == 41
    assert await explain(runtime, "00000000-0000-0000-0000-000000000000") is None
    assert await explain(runtime, "not-an-id") is None


async def test_a_poison_reminder_explains_its_attempts_and_retry_time(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    start = T0 + timedelta(hours=2)
    e = calendar_event(StartAt=start, ReminderOffsetsMinutes=[60])
    await CalendarEventsApplier(runtime)([read_at(e, 0, 7)])
    # A row the dispatcher cannot turn into a ReminderDueEvent (an unknown time zone).
    await pool.execute("UPDATE calendar.events SET time_zone = 'Mars/Olympus'")
    result = await CalendarReminderDispatcher(runtime).run_once(
        RunContext.at(start, clock=runtime.clock)
    )
    assert result.sent_count == 0
    reminder_id = await pool.fetchval("SELECT reminder_id::text FROM calendar.event_reminders")
    found = await explain(runtime, reminder_id)
    assert found is not None and found["row"]["status"] == "Pending"
    dispatch = found["dispatch"]
    assert dispatch["attempts"] == 1 and dispatch["last_error_code"]
    assert (
        dispatch["next_attempt_at"] is not None and dispatch["next_attempt_at"] > start.isoformat()
    )


async def test_a_reminder_whose_record_was_parked_says_so(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    start = T0 + timedelta(hours=2)
    e = calendar_event(StartAt=start, ReminderOffsetsMinutes=[60])
    await CalendarEventsApplier(runtime)([read_at(e, 3, 42)])
    assert (
        await CalendarReminderDispatcher(runtime).run_once(
            RunContext.at(start, clock=runtime.clock)
        )
    ).sent_count == 1
    outbox_id = await pool.fetchval("SELECT id FROM ops.outbox")
    async with pool.acquire() as conn:  # what the relay does with a row Kafka refuses for good
        moved = await outbox_repo.parked_move(
            conn, [outbox_repo.ParkRequest(outbox_id, "unknown_topic", "TopicUnavailable", 3)], T0
        )
    assert moved == 1
    reminder_id = await pool.fetchval("SELECT reminder_id::text FROM calendar.event_reminders")
    found = await explain(runtime, reminder_id)
    assert found is not None
    [record] = found["outbox"]
    assert (record["outbox_id"], record["published_at"], record["parked"]) == (
        outbox_id,
        None,
        "unknown_topic",
    )
