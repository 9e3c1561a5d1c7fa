"""Outbox relay on real PostgreSQL and Kafka: a relay paused mid-pass holds at most
``max_lanes_per_pass`` lanes while other relays keep publishing."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

import db.outbox as repo
from devkit.harness.outbox import (
    GatedProducer,
    RecordingFactory,
    assert_per_key_order,
    backlog,
    drain,
    held_lanes,
    ids_of,
    lanes_of,
    opened,
    write,
)
from devkit.kafka import create_topics, read_to_end
from streams.metrics import Metrics
from streams.outbox import OutboxRecord, OutboxRelay, RelayConfig
from streams.outbox.config import DEFAULT_MAX_LANES_PER_PASS

pytestmark = pytest.mark.integration


async def test_paused_relay_holds_at_most_max_lanes_others_keep_publishing(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}outbox.paused"
    await create_topics(kafka_bootstrap, [topic])
    ids = await write(pool, [OutboxRecord(topic, f"key-{i}", f'{{"N": {i}}}') for i in range(1280)])
    lane_of = await lanes_of(pool, ids)
    assert set(lane_of.values()) == set(range(repo.LANES)), "every lane has work"

    gate, entered = asyncio.Event(), asyncio.Event()
    factory = RecordingFactory(kafka_bootstrap, wrap=lambda p: GatedProducer(p, gate, entered))
    # Default lane bound; a long publish timeout so that only the gate holds the pass.
    paused = OutboxRelay(
        dsn=database_url,
        producer_factory=factory,
        metrics=Metrics().outbox,
        config=RelayConfig(publish_timeout=60),
    )
    other = OutboxRelay(dsn=database_url, bootstrap=kafka_bootstrap, metrics=Metrics().outbox)
    async with opened(paused), opened(other):
        held_pass = asyncio.create_task(paused.run_once())
        try:
            await asyncio.wait_for(entered.wait(), 10)
            held = await held_lanes(pool)
            published_by_other = await drain(other)
            async with pool.acquire() as conn:
                left = {
                    int(r["lane"])
                    for r in await conn.fetch(
                        "SELECT DISTINCT lane FROM ops.outbox WHERE published_at IS NULL"
                    )
                }
        finally:
            gate.set()
        first = await asyncio.wait_for(held_pass, 30)
        published_by_paused = first.published + await drain(paused)

    assert len(held) == DEFAULT_MAX_LANES_PER_PASS == 16, held
    assert left == held, "the other relay published every lane the paused one did not hold"
    in_held = sum(1 for i in ids if lane_of[i] in held)
    assert published_by_other == len(ids) - in_held
    assert published_by_paused == in_held
    assert await backlog(pool) == 0
    received = await read_to_end(kafka_bootstrap, topic)
    assert sorted(ids_of(received)) == ids, "each row exactly once"
    assert_per_key_order(received)
