"""Hostile input and a sick database against a real worker process, driven by a plain Kafka
client: nothing may stop a partition, nothing may be lost, and /health must say when the
worker cannot make progress."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer

from devkit.kafka import read_to_end
from devkit.messages.factories import calendar_event, encode
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

EVENTS = "pin.calendar.events.v1"
STALL_SECONDS = 3


@pytest.fixture(scope="module")
def stack(
    module_database_url: str, kafka_bootstrap: str, module_topic_prefix: str, module_tmp: Path
) -> Iterator[dict[str, Any]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=module_topic_prefix)
    asyncio.run(ensure_topics(settings, contract_topic_names(settings)))
    env = worker_env(
        module_database_url,
        kafka_bootstrap,
        module_topic_prefix,
        STREAM_STALL_SECONDS=str(STALL_SECONDS),
    )
    worker = WorkerProcess(env, module_tmp, "hostile-worker").start()
    try:
        asyncio.run(worker.wait_ready())
        yield {
            "db": module_database_url,
            "kafka": kafka_bootstrap,
            "topic": module_topic_prefix + EVENTS,
            "dlq": module_topic_prefix + EVENTS + ".dlq",
            "worker": worker,
        }
    finally:
        worker.stop()


async def send_raw(
    bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None, int]]
) -> None:
    """A plain producer (not the project's helpers) that may send up to 2 MB per record."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", max_request_size=2 * 1024 * 1024
    )
    await producer.start()
    try:
        for key, value, partition in records:
            if key is None and value is None:
                # Kafka accepts such a record (other clients send it); aiokafka's send()
                # refuses it, its batch API does not.
                batch = producer.create_batch()
                batch.append(key=None, value=None, timestamp=None)
                await (await producer.send_batch(batch, topic, partition=partition))
            else:
                await (await producer.send(topic, key=key, value=value, partition=partition))
    finally:
        await producer.stop()


async def stored_version(db: str, event_id: str) -> int | None:
    conn = await asyncpg.connect(db)
    try:
        value: int | None = await conn.fetchval(
            "SELECT version FROM calendar.events WHERE event_id = $1::uuid", event_id
        )
        return value
    finally:
        await conn.close()


def partition_of(key: bytes, partitions: int = 4) -> int:
    """The partition any Kafka client's default partitioner picks for ``key`` (murmur2)."""
    from aiokafka.partitioner import DefaultPartitioner

    parts = list(range(partitions))
    return int(DefaultPartitioner()(key, parts, parts))


@pytest.mark.timeout(300)  # module worker start 90 + applied 60 + DLQ read 60
async def test_poison_messages_are_dead_lettered_and_the_partition_keeps_flowing(
    stack: dict[str, Any],
) -> None:
    sentinel = calendar_event()
    key = sentinel["EventId"].encode()
    p = partition_of(key)
    folder_tz = encode(calendar_event(EventId=sentinel["EventId"], TimeZone="America"))
    long_tz = encode(calendar_event(EventId=sentinel["EventId"], TimeZone="Europe/" + "x" * 300))
    # Larger than the worker's producer accepts (1,000,000 bytes), smaller than the broker's limit.
    huge = b'{"EventId": "' + b"x" * 1_020_000 + b'"}'
    await send_raw(
        stack["kafka"],
        stack["topic"],
        [
            (key, folder_tz, p),
            (key, long_tz, p),
            (None, None, p),  # neither key nor value
            (key, huge, p),
            (key, encode(sentinel), p),  # after all of them on the same partition
        ],
    )
    await eventually(
        lambda: stored_version(stack["db"], sentinel["EventId"]),
        timeout=60,
        what="sentinel applied",
    )

    async def dead_lettered() -> list[Any]:
        return [
            r
            for r in await read_to_end(stack["kafka"], stack["dlq"])
            if dict(r.headers).get("dlq-source-partition") == str(p).encode()
        ]

    # The sentinel may be stored before the batch of the poison records is done (two
    # batches in flight): wait for their DLQ records rather than read once.
    dead = await eventually(
        dead_lettered, timeout=30, what="four DLQ records", until=lambda d: len(d) >= 4
    )
    by_offset = sorted(dead, key=lambda r: int(dict(r.headers)["dlq-source-offset"]))
    assert len(by_offset) == 4
    headers = [dict(r.headers) for r in by_offset]
    assert [h["dlq-error-kind"] for h in headers] == [b"schema", b"schema", b"json", b"schema"]
    assert b"TimeZone" in headers[0]["dlq-reason"] and b"TimeZone" in headers[1]["dlq-reason"]
    assert by_offset[0].value == folder_tz and by_offset[1].value == long_tz
    assert headers[2]["dlq-value-null"] == b"true" and by_offset[2].key is None
    assert headers[3]["dlq-value-truncated"] == b"true"
    assert headers[3]["dlq-original-size"] == str(len(huge)).encode()
    assert huge.startswith(by_offset[3].value) and len(by_offset[3].value) == 64 * 1024
    status, health = stack["worker"].get("/health")
    assert status == 200, health
    status, body = stack["worker"].get("/status?format=json")
    [agent] = [a for a in body["agents"] if a["agent"] == "calendar-events"]
    assert agent["failing"] is False and agent["crashed"] is False
    assert agent["dlq"]["by_kind"]["schema"] >= 3 and agent["dlq"]["by_kind"]["json"] >= 1


@pytest.mark.timeout(300)  # three waits of 60 s (+ the module worker start if first)
async def test_a_sick_database_blocks_the_partition_without_losing_and_health_says_so(
    stack: dict[str, Any],
) -> None:
    admin = await asyncpg.connect(stack["db"])
    try:
        await admin.execute(
            """
            CREATE OR REPLACE FUNCTION calendar.disk_full() RETURNS trigger LANGUAGE plpgsql AS
            $$ BEGIN RAISE EXCEPTION 'disk full' USING ERRCODE = '53100'; END $$;
            CREATE TRIGGER disk_full BEFORE INSERT OR UPDATE ON calendar.events
                FOR EACH ROW EXECUTE FUNCTION calendar.disk_full();
            """
        )
        msg = calendar_event()
        await send_raw(
            stack["kafka"],
            stack["topic"],
            [
                (
                    msg["EventId"].encode(),
                    encode(msg),
                    partition_of(msg["EventId"].encode()),
                )
            ],
        )

        async def not_ready() -> Any:
            status, body = stack["worker"].get("/health")
            return body if status == 503 and body.get("stalled_partitions") else None

        health = await eventually(not_ready, timeout=60, what="/health not ready")
        assert list(health["stalled_partitions"]) == ["calendar-events"]
        _, body = stack["worker"].get("/status?format=json")
        [agent] = [a for a in body["agents"] if a["agent"] == "calendar-events"]
        assert agent["failing"] is True and agent["stalled"][0]["lag"] >= 1
        _status, metrics = stack["worker"].get("/metrics")
        assert 'reminders_stream_partitions_stalled{agent="calendar-events"} 1.0' in metrics
        await admin.execute("DROP TRIGGER disk_full ON calendar.events")
        await eventually(
            lambda: stored_version(stack["db"], msg["EventId"]), timeout=60, what="applied"
        )

        async def ready() -> Any:
            status, body = stack["worker"].get("/health")
            return body if status == 200 else None

        await eventually(ready, timeout=60, what="/health ready again")
    finally:
        await admin.execute("DROP TRIGGER IF EXISTS disk_full ON calendar.events")
        await admin.close()
    dead = await read_to_end(stack["kafka"], stack["dlq"])
    assert not any(r.value == encode(msg) for r in dead)  # blocked, never dead-lettered
