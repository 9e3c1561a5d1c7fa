"""Kafka helpers for automation tests: relay the outbox, read an output topic with a plain
aiokafka consumer."""

from __future__ import annotations

import asyncpg
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord, TopicPartition

from devkit.wait import eventually
from streams.metrics import Metrics
from streams.outbox import OutboxRelay, RelayConfig

PARTITIONS = 4


async def relay_all(database_url: str, bootstrap: str, pool: asyncpg.Pool) -> None:
    """Run a relay until every outbox row is published."""
    relay = OutboxRelay(
        dsn=database_url, bootstrap=bootstrap, metrics=Metrics().outbox, config=RelayConfig()
    )
    await relay.start()
    try:

        async def published() -> bool:
            left = await pool.fetchval("SELECT count(*) FROM ops.outbox WHERE published_at IS NULL")
            return bool(left == 0)

        await eventually(published, timeout=60, what="the outbox published")
    finally:
        await relay.stop()


async def read_topic(bootstrap: str, topic: str) -> list[ConsumerRecord[bytes, bytes]]:
    """Everything on ``topic`` now, with a plain consumer (no group, from the beginning)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        out: list[ConsumerRecord[bytes, bytes]] = []

        async def caught_up() -> bool:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                out.extend(batch)
            return all([await consumer.position(tp) >= end for tp, end in ends.items()])

        await eventually(caught_up, timeout=30, what=f"the end of {topic}", interval=0)
        return out
    finally:
        await consumer.stop()
