"""Real-Kafka helpers for tests: create topics, produce, and consume until a count is reached."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from aiokafka.structs import ConsumerRecord, TopicPartition

Header = tuple[str, bytes]


async def create_topics(bootstrap: str, names: Iterable[str], partitions: int = 4) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        for name in names:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


async def produce(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[str | None, bytes | None]]
    | Sequence[tuple[str | None, bytes | None, list[Header]]],
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        futures = []
        for rec in records:
            key, value = rec[0], rec[1]
            headers = list(rec[2]) if len(rec) > 2 else []  # type: ignore[misc]
            futures.append(
                await producer.send(
                    topic,
                    value=value,
                    key=key.encode() if key is not None else None,
                    headers=headers,
                )
            )
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def consume(
    bootstrap: str,
    topic: str,
    *,
    count: int,
    timeout: float = 60.0,
    settle: float = 0.0,
) -> list[ConsumerRecord[bytes, bytes]]:
    """Read ``topic`` from the beginning until ``count`` records arrived (or fail on timeout).

    ``settle`` keeps reading that many seconds longer, to catch records beyond ``count``
    (duplicates) in tests that assert an exact number.
    """
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
    )
    await consumer.start()
    out: list[ConsumerRecord[bytes, bytes]] = []
    try:
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                out.extend(records)
        if settle:
            end = time.monotonic() + settle
            while time.monotonic() < end:
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    out.extend(records)
    finally:
        await consumer.stop()
    if len(out) < count:
        raise AssertionError(
            f"expected {count} records on {topic}, got {len(out)} within {timeout}s"
        )
    return out


async def read_to_end(bootstrap: str, topic: str) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record on ``topic`` up to its end offsets taken at the call: a late duplicate
    cannot slip past, as it could past a fixed listening window."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        parts = [
            TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])
        ]
        if not parts:
            return []
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        out: list[ConsumerRecord[bytes, bytes]] = []
        remaining = {tp for tp in parts if ends[tp] > 0}
        while remaining:
            batch = await consumer.getmany(*remaining, timeout_ms=500)
            for tp, records in batch.items():
                out.extend(r for r in records if r.offset < ends[tp])
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
        return out
    finally:
        await consumer.stop()
