"""Reminders due just after a PostgreSQL outage are on the topic within seconds of its return,
not after a retry delay that grew during the outage.

A PostgreSQL of this test only (devkit/stacks/private_stack.py, PostgreSQL alone: the shared
one is never stopped) and the shared Kafka. One worker ingests events whose reminders come
due one to five seconds after the planned return; the server is stopped for OUTAGE seconds
(long enough for the retry delays to reach their 30 s cap) and started again. Each reminder's
first record on pin.calendar.reminder-due.v1 must come within RETURN_BOUND seconds of the
later of its DueAt and the server's return.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from db.migrate import migrate
from devkit.database import scalar
from devkit.kafka import read_to_end
from devkit.loads.calendar_load import calendar_message
from devkit.stacks.private_stack import PrivateStack
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

EVENTS_TOPIC = "pin.calendar.events.v1"
DUE_TOPIC = "pin.calendar.reminder-due.v1"
OUTAGE = 100.0  # the backoffs reach their 30 s cap after about 32 s of failures
RETURN_BOUND = 5.0
REMINDERS = 5
STORED = "SELECT count(*) FROM calendar.event_reminders"


@pytest.fixture
def private_postgres() -> Iterator[PrivateStack]:
    # Under /tmp, not tmp_path: pytest resets its own root to mode 700 (a concurrent session
    # does it too), and the server's user must traverse to its data directory.
    stack = PrivateStack().up(kafka=False)
    try:
        yield stack
    finally:
        stack.down()


@pytest.mark.timeout(600)
async def test_reminders_due_after_a_postgres_outage_go_out_within_seconds_of_its_return(
    private_postgres: PrivateStack, kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}."
    database = private_postgres.database_url
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=prefix, database_url=database)
    await migrate(database)
    await ensure_topics(settings, contract_topic_names(settings))
    worker = WorkerProcess(worker_env(database, kafka_bootstrap, prefix), tmp_path)
    try:
        worker.start()
        await worker.wait_ready(timeout=180)
        now = datetime.now(UTC)
        back_planned = now + timedelta(seconds=10 + OUTAGE)
        dues = [back_planned + timedelta(seconds=k) for k in range(1, REMINDERS + 1)]
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        await producer.start()
        try:
            for due in dues:
                msg = calendar_message(
                    event_id=str(uuid.uuid4()),
                    tenant_id=str(uuid.uuid4()),
                    owner_user_id=str(uuid.uuid4()),
                    start_at=due,
                    offsets=[0],
                    version=1,
                    occurred_at=now,
                )
                await producer.send_and_wait(
                    settings.topic(EVENTS_TOPIC),
                    json.dumps(msg).encode(),
                    key=msg["EventId"].encode(),
                )
        finally:
            await producer.stop()
        await eventually(
            lambda: scalar(database, STORED),
            until=lambda n: n == REMINDERS,
            timeout=10,
            what="the reminders stored before the outage",
        )

        private_postgres.stop_postgres()
        await asyncio.sleep(OUTAGE)  # the fault's length, not a wait for a condition
        private_postgres.start_postgres()
        back = datetime.now(UTC)
        assert worker.proc is not None and worker.proc.poll() is None, worker.tail(60)

        async def published() -> int:
            return len(await read_to_end(kafka_bootstrap, settings.topic(DUE_TOPIC)))

        started = time.monotonic()
        await eventually(
            published,
            until=lambda n: n >= REMINDERS,
            timeout=60,
            what="the reminders on the topic after the outage",
        )
        records = await read_to_end(kafka_bootstrap, settings.topic(DUE_TOPIC))
        late = {}
        for r in records:
            due = datetime.fromisoformat(json.loads(r.value or b"{}")["StartAt"])
            on_topic = datetime.fromtimestamp(r.timestamp / 1000, UTC)
            late[due] = (on_topic - max(due, back)).total_seconds()
        print(
            f"\nPostgreSQL back at {back.isoformat()} after {OUTAGE:g} s; reminders on the "
            f"topic {', '.join(f'{v:.1f}' for v in sorted(late.values()))} s after the later "
            f"of their DueAt and the return (all in {time.monotonic() - started:.1f} s)"
        )
        assert len(late) == REMINDERS
        assert max(late.values()) <= RETURN_BOUND, (late, worker.tail(80))
    finally:
        worker.kill()
