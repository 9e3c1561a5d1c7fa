"""Real-Kafka helpers for tests: create topics, produce, and consume until a count is reached."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from aiokafka.structs import ConsumerRecord, TopicPartition

from devkit.wait import NotWithin, eventually

Header = tuple[str, bytes]

# aiokafka security keyword arguments (streams.kafka_client.security_options); None = PLAINTEXT.
Security = Mapping[str, Any] | None


async def create_topics(
    bootstrap: str, names: Iterable[str], partitions: int = 4, security: Security = None
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **(security or {}))
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
    security: Security = None,
) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, **(security or {})
    )
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
    bootstrap: str, topic: str, *, count: int, timeout: float = 60.0, security: Security = None
) -> list[ConsumerRecord[bytes, bytes]]:
    """Read ``topic`` from the beginning until ``count`` records arrived (or fail on timeout).

    A wait for records to arrive; it says nothing about what comes after them. To assert an
    exact number (no duplicates), let the producing side finish and use ``read_to_end``.
    """
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
        **(security or {}),
    )
    await consumer.start()
    out: list[ConsumerRecord[bytes, bytes]] = []

    async def enough() -> bool:
        batch = await consumer.getmany(timeout_ms=200)
        for records in batch.values():
            out.extend(records)
        return len(out) >= count

    try:
        await eventually(enough, timeout=timeout, what=f"{count} records on {topic}", interval=0)
    except NotWithin:
        raise NotWithin(
            f"expected {count} records on {topic}, got {len(out)} within {timeout}s"
        ) from None
    finally:
        await consumer.stop()
    return out


async def read_to_end(
    bootstrap: str, topic: str, *, timeout: float = 60.0, security: Security = None
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record on ``topic`` up to its end offsets taken at the call: a late duplicate
    cannot slip past, as it could past a fixed listening window. Call it once the producing
    side is known to be done (its rows marked published, its process exited)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **(security or {}),
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

        async def at_end() -> bool:
            if remaining:
                batch = await consumer.getmany(*remaining, timeout_ms=500)
                for tp, records in batch.items():
                    out.extend(r for r in records if r.offset < ends[tp])
                for tp in list(remaining):
                    if await consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)
            return not remaining

        await eventually(at_end, timeout=timeout, what=f"{topic} read to {ends}", interval=0)
        return out
    finally:
        await consumer.stop()


async def delete_topics_with_prefix(bootstrap: str, prefix: str) -> int:
    """Delete every topic whose name starts with ``prefix`` (a test's or a bench's own, and
    the internal topics of an app id under it); returns how many. A broker that keeps
    every run's topics eventually runs out of open files."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if names:
            await admin.delete_topics(names)
        return len(names)
    finally:
        await admin.close()
