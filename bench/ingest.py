"""Ingest: calendar change events -> projection + reminder rows, one worker process.

Reference in the same run: a bare aiokafka consumer reading the same messages and doing
nothing with them (the ceiling that Kafka and the client set on this machine).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from bench.common import KAFKA_BOOTSTRAP, database
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings


async def run(events: int = 50_000) -> dict[str, float]:
    print(f"\n== ingest: {events:,} calendar events (2 offsets each) -> rows, one worker ==")
    prefix = f"bench{uuid.uuid4().hex[:8]}."
    settings = Settings(kafka_bootstrap=KAFKA_BOOTSTRAP, topic_prefix=prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    topic = settings.topic("pin.calendar.events.v1")
    start = datetime.now(UTC) + timedelta(days=2)
    producer = AIOKafkaProducer(
        bootstrap_servers=KAFKA_BOOTSTRAP, linger_ms=20, max_batch_size=256 * 1024
    )
    await producer.start()
    try:
        now = datetime.now(UTC).isoformat()
        for i in range(events):
            msg = {
                "ContractVersion": 1,
                "EventId": str(uuid.uuid4()),
                "TenantId": str(uuid.uuid4()),
                "OwnerUserId": str(uuid.uuid4()),
                "Kind": "Meeting",
                "StartAt": (start + timedelta(seconds=i)).isoformat(),
                "TimeZone": "UTC",
                "Status": "Planned",
                "ReminderOffsetsMinutes": [60, 15],
                "Version": 1,
                "OccurredAt": now,
            }
            await producer.send(topic, json.dumps(msg).encode(), key=msg["EventId"].encode())
        await producer.flush()
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=KAFKA_BOOTSTRAP,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        seen, t0 = 0, time.perf_counter()
        while seen < events:
            for records in (await consumer.getmany(timeout_ms=500, max_records=5000)).values():
                seen += len(records)
        raw_rate = events / (time.perf_counter() - t0)
    finally:
        await consumer.stop()
    print(f"  reference: bare aiokafka consume, no processing   {raw_rate:>9,.0f} msgs/s")

    async with database() as url:
        tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
        worker = WorkerProcess(worker_env(url, KAFKA_BOOTSTRAP, prefix), tmp, "ingest-worker")
        conn = await asyncpg.connect(url)
        try:
            worker.start()
            first = last = None
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                n = await conn.fetchval("SELECT count(*) FROM calendar.events")
                if n and first is None:
                    first = (time.perf_counter(), n)
                if n == events:
                    last = time.perf_counter()
                    break
                await asyncio.sleep(0.05)
            assert first is not None and last is not None, "worker did not ingest everything"
            reminders = await conn.fetchval("SELECT count(*) FROM calendar.event_reminders")
        finally:
            await conn.close()
            worker.stop()
    rate = (events - first[1]) / (last - first[0])
    print(
        f"  worker: events -> calendar.events + reminders     {rate:>9,.0f} events/s "
        f"({reminders:,} reminder rows)   (target >= 5,000/s)"
    )
    return {"rate": rate, "reference": raw_rate}
