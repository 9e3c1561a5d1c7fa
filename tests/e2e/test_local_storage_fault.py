"""A worker's own disk failing is not bad input (issue 21, finding 6), against a real worker.

Version 1 of some events is applied and cached. Then, while the local store refuses the cache
writes (``STREAMS_FAULT_WHILE`` at ``cache.store_write``, raised where RocksDB would say "No
space left on device"), version 2 of each comes: the messages are committed to PostgreSQL
and held, not dead-lettered (before, those the cache called unchanged went to the DLQ after
their commit), and ``/health`` is not ready naming the table. Once the store works again the worker is ready, every offset is
committed, each valid message was applied once, and only the invalid one is in the DLQ.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition

from devkit.kafka import produce, read_to_end
from devkit.messages.factories import calendar_event, encode
from devkit.observe.metrics import sample
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

EVENTS = "pin.calendar.events.v1"
TABLE = "calendar-event-cache"
VALID = 12
BAD = b'{"EventId": "not a uuid"}'


async def stored(db: str, ids: list[str]) -> dict[str, int]:
    conn = await asyncpg.connect(db)
    try:
        rows = await conn.fetch(
            "SELECT event_id::text AS id, version FROM calendar.events"
            " WHERE event_id = ANY($1::uuid[])",
            ids,
        )
    finally:
        await conn.close()
    return {r["id"]: r["version"] for r in rows}


async def everything_committed(bootstrap: str, group: str, topic: str) -> bool:
    """The group's committed offset is the end of every partition of ``topic`` that has
    records: every record was handled (offsets are committed only up to what was acked)."""
    tps = [TopicPartition(topic, p) for p in range(4)]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await reader.start()
    try:
        committed = await admin.list_consumer_group_offsets(group, partitions=tps)
        ends = await reader.end_offsets(tps)
    finally:
        await reader.stop()
        await admin.close()
    return all(
        ends[tp] == 0 or (tp in committed and committed[tp].offset == ends[tp]) for tp in tps
    )


@pytest.mark.timeout(420)
async def test_a_failing_local_store_holds_valid_messages_instead_of_dead_lettering_them(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    topic, dlq = topic_prefix + EVENTS, topic_prefix + EVENTS + ".dlq"
    group = f"{topic_prefix}reminders"  # the worker's APP_ID (worker_env)
    disk_full = tmp_path / "disk-full"
    env = worker_env(
        database_url,
        kafka_bootstrap,
        topic_prefix,
        STREAMS_FAULT_WHILE=f"cache.store_write:{disk_full}",
    )
    worker = WorkerProcess(env, tmp_path, "worker").start()
    try:
        await worker.wait_ready()
        # Far ahead of the wall clock, so no dispatcher sends any of these reminders.
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=30)
        v1 = [calendar_event(EventId=str(uuid.uuid4()), StartAt=start) for _ in range(VALID)]
        ids = [m["EventId"] for m in v1]
        await produce(kafka_bootstrap, topic, [(m["EventId"], encode(m)) for m in v1])
        await eventually(
            lambda: everything_committed(kafka_bootstrap, group, topic),
            timeout=90,
            what="v1 applied and cached",
        )

        disk_full.touch()  # from here the store refuses every cache write
        # Version 2 of every event: half only a new Version (the cache calls them unchanged:
        # the cheap path, where the stored row decides), half moved to another day.
        moved = start + timedelta(days=1)
        v2 = [
            {**m, "Version": 2, **({"StartAt": moved.isoformat()} if i % 2 else {})}
            for i, m in enumerate(v1)
        ]
        await produce(
            kafka_bootstrap,
            topic,
            [(m["EventId"], encode(m)) for m in v2] + [("bad", BAD)],
        )

        async def held_or_dead_lettered() -> tuple[int, dict[str, Any], list[Any]]:
            status, body = await asyncio.to_thread(worker.get, "/health")
            dead = [r for r in await read_to_end(kafka_bootstrap, dlq) if r.value != BAD]
            return status, body, dead

        _, body, dead = await eventually(
            held_or_dead_lettered,
            until=lambda s: s[2] or (s[0] == 503 and TABLE in s[1].get("local_storage", {})),
            timeout=90,
            what="/health not ready for the local store (or valid messages dead-lettered)",
            interval=0.5,
        )
        assert not dead, "valid messages dead-lettered: " + ", ".join(
            f"{r.key!r} {dict(r.headers).get('dlq-reason')!r}" for r in dead
        )
        failing = body["local_storage"][TABLE]["write"]
        assert failing["reason"] == "local_storage_error", body
        assert failing["error"] == "InjectedFault: injected fault at cache.store_write", body
        assert body["status"] == "not ready"
        # Held, not lost: what was taken is in the ledger, its offsets are not committed.
        await eventually(
            lambda: stored(database_url, ids),
            until=lambda v: 2 in v.values(),
            timeout=60,
            what="a version 2 committed",
        )
        assert not await everything_committed(kafka_bootstrap, group, topic)

        disk_full.unlink()  # the disk is back
        await worker.wait_ready(timeout=60)
        versions = await eventually(
            lambda: stored(database_url, ids),
            until=lambda v: set(v.values()) == {2},
            timeout=60,
            what="every version 2 stored",
        )
        assert len(versions) == VALID
        await eventually(
            lambda: everything_committed(kafka_bootstrap, group, topic),
            timeout=60,
            what="every offset committed",
        )
        dead_letters = await read_to_end(kafka_bootstrap, dlq)
        assert [r.value for r in dead_letters] == [BAD]
        _, text = worker.get("/metrics")
        metrics = str(text)
        # Each message handled once: v1 and the moved v2 applied, the unchanged v2 a no-op
        # (only the stored Version moved); none redelivered, none applied again.
        half = VALID // 2
        applied = sample(metrics, "reminders_stream_messages_total", topic=EVENTS, result="applied")
        noop = sample(metrics, "reminders_stream_messages_total", topic=EVENTS, result="noop")
        assert (applied, noop) == (VALID + half, half)
        assert sample(metrics, "reminders_stream_messages_total", topic=EVENTS, result="dlq") == 1
        errors = sample(
            metrics, "reminders_stream_local_storage_errors_total", table=TABLE, op="write"
        )
        assert errors is not None and errors >= 1
        assert sample(metrics, "reminders_stream_local_storage_failing", table=TABLE) == 0
    finally:
        worker.stop()
