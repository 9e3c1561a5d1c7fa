"""Reminder lateness under steady load: DueAt -> outbox commit and DueAt -> on the Kafka topic.

A real worker process (python -m streams worker) runs against a fresh database and its
own topics. Events are produced up front with StartAt spread so that ``rate`` reminders
per second come due for ``seconds`` seconds (offset 0: DueAt = StartAt); a consumer in
this process notes when each ReminderDueEvent arrives.
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

from bench.common import KAFKA_BOOTSTRAP, database, summary
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings


async def run(rate: int = 100, seconds: int = 60, lead: float = 10.0) -> dict[str, float]:
    total = rate * seconds
    print(
        f"\n== lateness: {rate}/s reminders coming due for {seconds} s ({total:,}), one worker =="
    )
    prefix = f"bench{uuid.uuid4().hex[:8]}."
    settings = Settings(kafka_bootstrap=KAFKA_BOOTSTRAP, topic_prefix=prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    async with database() as url:
        tmp = Path(tempfile.mkdtemp(prefix="bench-lateness-"))
        worker = WorkerProcess(
            worker_env(url, KAFKA_BOOTSTRAP, prefix), tmp, "bench-worker"
        ).start()
        try:
            await worker.wait_ready()
            return await _drive(settings, url, rate, seconds, lead, total)
        finally:
            worker.stop()


async def _drive(
    settings: Settings, url: str, rate: int, seconds: int, lead: float, total: int
) -> dict[str, float]:
    due_topic = settings.topic("pin.calendar.reminder-due.v1")
    consumer = AIOKafkaConsumer(
        due_topic,
        bootstrap_servers=KAFKA_BOOTSTRAP,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    arrivals: dict[str, tuple[float, datetime]] = {}

    async def collect() -> None:
        while len(arrivals) < total:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                now = time.time()
                for r in records:
                    body = json.loads(r.value)
                    arrivals.setdefault(
                        body["ReminderId"], (now, datetime.fromisoformat(body["StartAt"]))
                    )

    collector = asyncio.create_task(collect())
    first_due = datetime.now(UTC) + timedelta(seconds=lead)
    producer = AIOKafkaProducer(bootstrap_servers=KAFKA_BOOTSTRAP, linger_ms=5)
    await producer.start()
    try:
        now = datetime.now(UTC)
        for k in range(total):
            due = first_due + timedelta(seconds=k / rate)
            msg = {
                "ContractVersion": 1,
                "EventId": str(uuid.uuid4()),
                "TenantId": str(uuid.uuid4()),
                "OwnerUserId": str(uuid.uuid4()),
                "Kind": "Meeting",
                "StartAt": due.isoformat(),
                "TimeZone": "UTC",
                "Status": "Planned",
                "ReminderOffsetsMinutes": [0],
                "Version": 1,
                "OccurredAt": now.isoformat(),
            }
            await producer.send(
                settings.topic("pin.calendar.events.v1"),
                json.dumps(msg).encode(),
                key=msg["EventId"].encode(),
            )
        await producer.flush()
    finally:
        await producer.stop()
    print(
        f"  produced {total:,} events; first due at +{lead:.0f} s, last at +{lead + seconds:.0f} s"
    )
    try:
        await asyncio.wait_for(collector, timeout=lead + seconds + 120)
    finally:
        collector.cancel()
        await asyncio.gather(collector, return_exceptions=True)
        await consumer.stop()
    topic_lateness = [arrived - due.timestamp() for arrived, due in arrivals.values()]
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            """
            SELECT extract(epoch FROM o.created_at - r.due_at) AS outbox_s,
                   extract(epoch FROM r.sent_at - r.due_at) AS sent_s
            FROM ops.outbox o
            JOIN calendar.event_reminders r ON r.reminder_id = (o.payload::jsonb->>'ReminderId')::uuid
            """
        )
    finally:
        await conn.close()
    outbox = [float(r["outbox_s"]) for r in rows]
    print(f"  DueAt -> outbox commit (s): {summary(outbox)}   (target p99 <= 1.0)")
    print(f"  DueAt -> on the topic  (s): {summary(topic_lateness)}   (target p99 <= 2.0)")
    print("  reference: the seed's SLO is delivery <= 120 s after DueAt (60 s cycle + run)")
    from bench.common import pct

    return {
        "outbox_p99": pct(outbox, 99),
        "topic_p99": pct(topic_lateness, 99),
        "outbox_p50": pct(outbox, 50),
        "topic_p50": pct(topic_lateness, 50),
    }
