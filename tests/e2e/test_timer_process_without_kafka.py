"""A worker started while Kafka is down (a private stack whose broker the test kills): its
timer process starts once PostgreSQL answers, calendar-dispatch marks the due reminders Sent
and writes them to the outbox while the worker still waits for Kafka, /health says so, and
once the broker is back the relay publishes every row once (read back with a plain consumer).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest.mock import MagicMock

import pytest

from db.migrate import migrate
from devkit.database import scalar
from devkit.kafka import read_to_end
from devkit.loads.calendar_load import calendar_message
from devkit.messages.factories import parsed
from devkit.stacks.private_stack import PrivateStack
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.input.consumer import Decoded
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.calendar.events import CalendarEventsApplier

pytestmark = pytest.mark.e2e

DUE = "pin.calendar.reminder-due.v1"
EVENTS = 3
SENT = "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent'"
UNPUBLISHED = "SELECT count(*) FROM ops.outbox WHERE published_at IS NULL AND topic = $1"


@pytest.fixture
def stack() -> Iterator[PrivateStack]:
    private = PrivateStack()
    try:
        private.up()
        yield private
    finally:
        private.down()


async def _apply_events(settings: Settings, due: datetime) -> set[str]:
    """EVENTS calendar events, one reminder each due at ``due``, applied as the events agent
    applies them (the worker cannot read them: Kafka will be down)."""
    runtime = Runtime(settings)
    applier = CalendarEventsApplier(runtime)
    ids = [str(uuid.uuid4()) for _ in range(EVENTS)]
    messages = [
        calendar_message(
            event_id=event_id,
            tenant_id=str(uuid.uuid4()),
            owner_user_id=str(uuid.uuid4()),
            start_at=due + timedelta(minutes=1),
            offsets=[1],
            version=1,
            occurred_at=datetime.now(UTC),
        )
        for event_id in ids
    ]
    try:
        await applier([Decoded(MagicMock(), parsed(m)) for m in messages])
    finally:
        await runtime.close()
    return set(ids)


async def _sent(worker: WorkerProcess, database: str) -> int:
    assert worker.proc is not None and worker.proc.poll() is None, worker.tail(60)
    return int(await scalar(database, SENT))


@pytest.mark.timeout(600)
async def test_a_worker_started_while_kafka_is_down_dispatches_into_the_outbox_then_publishes_once(
    stack: PrivateStack, tmp_path: Path
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}."
    database = stack.database_url
    settings = Settings(kafka_bootstrap=stack.bootstrap, topic_prefix=prefix, database_url=database)
    await migrate(database)
    await ensure_topics(settings, contract_topic_names(settings))
    ids = await _apply_events(settings, datetime.now(UTC) + timedelta(seconds=10))
    stack.kill_broker()
    env = worker_env(
        database,
        stack.bootstrap,
        prefix,
        TIMER_CALENDAR_DISPATCH_INTERVAL_SECONDS="2",
        TIMER_CALENDAR_DISPATCH_MAX_DURATION_SECONDS="1",
    )
    worker = WorkerProcess(env, tmp_path)
    try:
        worker.start()
        # The worker waits for Kafka; its timer process dispatches into the outbox meanwhile.
        try:
            await eventually(
                lambda: _sent(worker, database),
                until=lambda n: n == EVENTS,
                timeout=120,
                what=f"{EVENTS} reminders Sent while Kafka is down",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{worker.tail(60)}") from None
        assert await scalar(database, UNPUBLISHED, settings.topic(DUE)) == EVENTS
        status, health = worker.get("/health")
        assert status == 503, health
        assert health["kafka"].startswith("waiting"), health
        assert health["postgres"] == "ok" and health["timer_process"] == "ok", health
        assert len(worker.pids) == 2, worker.pids  # the worker and its timer process

        stack.start_broker()
        ready = await worker.wait_ready(timeout=240)
        assert ready["timer_process"] == "ok", ready
        await eventually(
            lambda: scalar(database, UNPUBLISHED, settings.topic(DUE)),
            until=lambda n: n == 0,
            timeout=120,
            what="every outbox row published once Kafka is back",
        )
        records = await read_to_end(stack.bootstrap, settings.topic(DUE))
        seen = Counter(json.loads(r.value or b"{}").get("EventId") for r in records)
        assert seen == Counter(ids), f"published {dict(seen)}, expected each of {ids} once"
        log = worker.tail(100_000)
        assert "action=timer_process_exited" not in log, "the timer process exited"
    finally:
        worker.kill()
