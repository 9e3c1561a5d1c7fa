"""The outbox relay against a test database and Kafka: writing rows as producers of events do,
driving relay passes, reading what reached the topics, and producers and lane probes for faults."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord, TopicPartition

import db.outbox as repo
from db.connector import transaction
from devkit.wait import eventually
from streams.metrics import Metrics
from streams.outbox import (
    OutboxRecord,
    OutboxRelay,
    Producer,
    RelayConfig,
    insert_many,
    outbox_id_of,
)
from streams.outbox.producer import kafka_producer_factory
from streams.outbox.records import KafkaHeaders


async def write(
    pool: asyncpg.Pool, records: Sequence[OutboxRecord], per_tx: int = 5000
) -> list[int]:
    """Insert ``records`` in transactions of ``per_tx``, as producers of events would."""
    ids: list[int] = []
    for start in range(0, len(records), per_tx):
        async with transaction(pool) as conn:
            ids += await insert_many(conn, records[start : start + per_tx])
    return ids


async def backlog(pool: asyncpg.Pool) -> int:
    async with pool.acquire() as conn:
        return (await repo.backlog_get(conn)).count


def backlog_at_most(pool: asyncpg.Pool, limit: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await backlog(pool) <= limit

    return check


async def drain(relay: OutboxRelay, *, within: float = 60) -> int:
    """Run passes until a pass finds nothing to do; returns rows published."""
    published = 0

    async def idle_pass() -> bool:
        nonlocal published
        result = await relay.run_once()
        published += result.published
        return result.lanes == 0

    await eventually(idle_pass, timeout=within, what="a relay pass with nothing to do", interval=0)
    return published


@asynccontextmanager
async def running(relay: OutboxRelay) -> AsyncIterator[OutboxRelay]:
    await relay.start()
    try:
        yield relay
    finally:
        await relay.stop()


def new_relay(
    database_url: str, kafka_bootstrap: str, metrics: Metrics | None = None, **config: Any
) -> OutboxRelay:
    return OutboxRelay(
        dsn=database_url,
        bootstrap=kafka_bootstrap,
        metrics=(metrics or Metrics()).outbox,
        config=RelayConfig(**config),
    )


def ids_of(records: Sequence[ConsumerRecord[bytes, bytes]]) -> list[int]:
    out = []
    for r in records:
        outbox_id = outbox_id_of(list(r.headers))
        assert outbox_id is not None, "every relayed record carries an outbox-id header"
        out.append(outbox_id)
    return out


def assert_per_key_order(records: Sequence[ConsumerRecord[bytes, bytes]]) -> None:
    """Per key, first occurrences of ids are increasing (re-publishes may repeat earlier ids)."""
    seen: dict[bytes | None, list[int]] = defaultdict(list)
    firsts: set[int] = set()
    for r, outbox_id in zip(records, ids_of(records), strict=True):
        if outbox_id in firsts:
            continue
        firsts.add(outbox_id)
        seen[r.key].append(outbox_id)
    for key, ids in seen.items():
        assert ids == sorted(ids), f"key {key!r} out of order"


async def topic_size(bootstrap: str, topic: str, partitions: int = 4) -> int:
    """Records on ``topic`` (sum of end offsets): what producers got onto the broker."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        return int(sum(ends.values()))
    finally:
        await consumer.stop()


def sample(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> float:
    value = metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


class RecordingFactory:
    """The relay's real producer factory, keeping every producer it made."""

    def __init__(self, bootstrap: str, wrap: Callable[[Producer], Producer] | None = None) -> None:
        self._make = kafka_producer_factory(bootstrap)
        self._wrap = wrap
        self.made: list[Any] = []

    def __call__(self) -> Producer:
        producer = self._make()
        self.made.append(producer)
        return self._wrap(producer) if self._wrap else producer


class GatedProducer:
    """A real producer whose sends wait for ``gate``: a relay paused in the middle of a pass
    (after locking its lanes and reading its rows, before anything reaches Kafka)."""

    def __init__(self, inner: Producer, gate: asyncio.Event, entered: asyncio.Event) -> None:
        self.inner = inner
        self.gate = gate
        self.entered = entered

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()

    async def partitions_for(self, topic: str) -> set[int]:
        return await self.inner.partitions_for(topic)

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: KafkaHeaders | None = None,
    ) -> asyncio.Future[Any]:
        self.entered.set()
        await self.gate.wait()
        return await self.inner.send(
            topic,
            value=value,
            key=key,
            partition=partition,
            timestamp_ms=timestamp_ms,
            headers=headers,
        )


async def held_lanes(pool: asyncpg.Pool) -> set[int]:
    """Lanes some session of this test's database holds the relay's advisory lock on."""
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT objid::int AS lane FROM pg_locks "
            "WHERE locktype = 'advisory' AND granted AND objsubid = 2 "
            "AND classid = $1::bigint::oid "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            repo.LANE_LOCK_SPACE,
        )
    return {int(r["lane"]) for r in rows}


async def lanes_free(pool: asyncpg.Pool, lanes: set[int]) -> bool:
    """True if this connection can take every lane's lock (as another relay would)."""
    async with pool.acquire() as conn, conn.transaction():
        return bool(
            await conn.fetchval(
                "SELECT bool_and(pg_try_advisory_xact_lock($1, lane)) FROM unnest($2::int[]) lane",
                repo.LANE_LOCK_SPACE,
                sorted(lanes),
            )
        )


async def lanes_of(pool: asyncpg.Pool, ids: list[int]) -> dict[int, int]:
    async with pool.acquire() as conn:
        rows = await conn.fetch("SELECT id, lane FROM ops.outbox WHERE id = ANY($1)", ids)
    return {int(r["id"]): int(r["lane"]) for r in rows}


def restarts(metrics: Metrics, reason: str) -> float:
    return sample(metrics, "reminders_outbox_producer_restarts_total", {"reason": reason})


@asynccontextmanager
async def opened(relay: OutboxRelay) -> AsyncIterator[OutboxRelay]:
    async with relay:
        yield relay
