"""Outbox relay on real PostgreSQL and Kafka: NOTIFY wakes it, polling covers a lost NOTIFY."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from devkit.harness.outbox import (
    backlog_at_most,
    ids_of,
    new_relay,
    running,
    write,
)
from devkit.kafka import consume, create_topics, read_to_end
from devkit.wait import eventually
from streams.outbox import (
    OutboxRecord,
    OutboxRelay,
)

pytestmark = pytest.mark.integration


async def test_notify_wakes_the_relay_without_polling(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}outbox.notify"
    await create_topics(kafka_bootstrap, [topic])
    # An hour between polls: only a NOTIFY can get the rows out within the test.
    relay = new_relay(database_url, kafka_bootstrap, poll_interval=3600)
    async with running(relay):
        await asyncio.wait_for(relay.listening.wait(), 10)
        ids = [await publish_when_idle(relay, pool, kafka_bootstrap, topic, n) for n in (1, 2)]
    # Both rows were written while the relay slept for an hour: NOTIFY woke it each time.
    assert ids_of(await read_to_end(kafka_bootstrap, topic)) == ids


async def publish_when_idle(
    relay: OutboxRelay, pool: asyncpg.Pool, bootstrap: str, topic: str, n: int
) -> int:
    """Once the relay sleeps with nothing pending, write the n-th row of ``topic`` and wait
    until it is on the topic: only a NOTIFY or a poll can have woken the relay for it."""
    await eventually(backlog_at_most(pool, 0), timeout=10, what="earlier rows marked")
    await asyncio.wait_for(relay.idle.wait(), 10)
    [row_id] = await write(pool, [OutboxRecord(topic, "k", f'{{"N": {n}}}')])
    await consume(bootstrap, topic, count=n, timeout=10)
    return row_id


async def test_polling_publishes_when_no_notify_arrives(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}outbox.poll"
    await create_topics(kafka_bootstrap, [topic])
    async with pool.acquire() as conn:  # this test's own database
        await conn.execute("ALTER TABLE ops.outbox DISABLE TRIGGER tr_outbox_notify")
    relay = new_relay(database_url, kafka_bootstrap, poll_interval=0.2)
    async with running(relay):
        await asyncio.wait_for(relay.listening.wait(), 10)
        ids = [await publish_when_idle(relay, pool, kafka_bootstrap, topic, n) for n in (1, 2)]
    # Both rows were written while the relay slept and no NOTIFY was sent: polls found them.
    assert ids_of(await read_to_end(kafka_bootstrap, topic)) == ids


async def test_listener_reconnects_after_its_connection_is_killed(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}outbox.relisten"
    await create_topics(kafka_bootstrap, [topic])
    relay = new_relay(database_url, kafka_bootstrap, poll_interval=3600)
    async with running(relay):
        await asyncio.wait_for(relay.listening.wait(), 10)
        [killed] = await listener_pids(pool)
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT pg_terminate_backend($1)", killed)

        async def relistening() -> bool:
            return bool(set(await listener_pids(pool)) - {killed})

        await eventually(relistening, timeout=15, what="a new LISTEN connection")
        await asyncio.wait_for(relay.listening.wait(), 5)
        ids = [await publish_when_idle(relay, pool, kafka_bootstrap, topic, n) for n in (1, 2)]
    # Both rows needed a NOTIFY on the new connection (polls are an hour apart).
    assert ids_of(await read_to_end(kafka_bootstrap, topic)) == ids


async def listener_pids(pool: asyncpg.Pool) -> list[int]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND query ILIKE 'LISTEN%'"
        )
    return [r["pid"] for r in rows]
