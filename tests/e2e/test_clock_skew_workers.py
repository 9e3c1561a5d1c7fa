"""Two workers, one whose own clock is 10 minutes fast (libfaketime): reminders go out at
their DueAt in the database's time, never before, each once; the fast worker says its clock
is off (/health not ready on ``clock``, ``reminders_worker_clock_skew_seconds``).

Input through a plain aiokafka producer, output read from the topic, as another team would."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from devkit.database import scalar
from devkit.observe.metrics import sample
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
HAS_FAKETIME = FAKETIME.exists()
EVENTS = 120
FAST_BY = timedelta(minutes=10)


def event(start: datetime, now: datetime) -> dict[str, Any]:
    return {
        "ContractVersion": 1,
        "EventId": str(uuid.uuid4()),
        "TenantId": str(uuid.uuid4()),
        "OwnerUserId": str(uuid.uuid4()),
        "ClientUserId": None,
        "Kind": "Meeting",
        "StartAt": start.isoformat(),
        "TimeZone": "Europe/Berlin",
        "Status": "Planned",
        "ReminderOffsetsMinutes": [0],
        "AppointmentId": None,
        "Version": 1,
        "OccurredAt": now.isoformat(),
    }


@pytest.mark.timeout(300)
async def test_a_worker_with_a_fast_clock_sends_nothing_before_its_due_time(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    assert HAS_FAKETIME, f"{FAKETIME} missing: apt-get install libfaketime (.ci/run does)"
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    env = worker_env(database_url, kafka_bootstrap, topic_prefix)
    honest = WorkerProcess(env, tmp_path, "honest").start()
    fast_env = {**env, "LD_PRELOAD": str(FAKETIME), "FAKETIME": "+600s"}
    fast = WorkerProcess(fast_env, tmp_path, "fast")
    fast.start()
    received: dict[str, list[float]] = {}
    reader = asyncio.create_task(read_due(kafka_bootstrap, topic_prefix, received))
    try:
        await honest.wait_ready()

        async def fast_health() -> dict[str, Any] | None:
            assert fast.proc is not None and fast.proc.poll() is None, fast.tail()
            with contextlib.suppress(OSError):
                status, body = await asyncio.to_thread(fast.get, "/health")
                if status == 503 and "ahead of" in str(body.get("clock", "")):
                    return dict(body)
            return None

        health = await eventually(fast_health, timeout=120, what="fast worker's clock check")
        assert health is not None and health["kafka"] == "ok", health
        _, metrics = await asyncio.to_thread(fast.get, "/metrics")
        skew = sample(str(metrics), "reminders_worker_clock_skew_seconds")
        assert skew is not None and skew > FAST_BY.total_seconds() - 30, skew

        # Due 20-50 s from now in the database's (and this test's) time: well inside the fast
        # worker's 10 minutes, so a worker trusting its own clock would send them at once.
        now = datetime.now(UTC)
        due = {}
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            for i in range(EVENTS):
                msg = event(now + timedelta(seconds=20 + 30 * i / EVENTS), now)
                due[msg["EventId"]] = datetime.fromisoformat(msg["StartAt"])
                await producer.send(
                    f"{topic_prefix}pin.calendar.events.v1",
                    json.dumps(msg).encode(),
                    key=msg["EventId"].encode(),
                )
            await producer.flush()
        finally:
            await producer.stop()

        await eventually(
            lambda: len(received),
            until=lambda n: n >= EVENTS,
            timeout=150,
            what=f"{EVENTS} reminders on the topic",
            interval=0.5,
        )
        doubled = {e: len(ats) for e, ats in received.items() if len(ats) > 1}
        early = {
            e: round((due[e] - datetime.fromtimestamp(min(ats), UTC)).total_seconds(), 1)
            for e, ats in received.items()
            if datetime.fromtimestamp(min(ats), UTC) < due[e]
        }
        print(f"clock skew: fast worker {skew:.1f}s; {len(received)} reminders, early {len(early)}")
        assert not early, f"{len(early)} reminders published before DueAt (s early): {early}"
        assert not doubled, f"reminders sent more than once: {doubled}"
        assert set(received) == set(due)
        early_rows = await scalar(
            database_url,
            "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent' AND sent_at < due_at",
        )
        assert early_rows == 0
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        fast.stop()
        honest.stop()


async def read_due(bootstrap: str, prefix: str, received: dict[str, list[float]]) -> None:
    """Record when each event's reminders reached the topic (this host's clock, which the
    database shares)."""
    consumer = AIOKafkaConsumer(
        f"{prefix}pin.calendar.reminder-due.v1",
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        metadata_max_age_ms=1000,
    )
    await consumer.start()
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=200)
            at = time.time()
            for records in batch.values():
                for r in records:
                    received.setdefault(json.loads(r.value)["EventId"], []).append(at)
    finally:
        await consumer.stop()
