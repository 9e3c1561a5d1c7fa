"""Outbox relay on real PostgreSQL and Kafka: a row too large for its topic is parked."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime

import asyncpg
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from devkit.harness.outbox import (
    assert_per_key_order,
    backlog,
    drain,
    ids_of,
    sample,
    write,
)
from devkit.kafka import read_to_end
from streams.clock import ManualClock
from streams.metrics import Metrics
from streams.outbox import (
    OutboxRecord,
    OutboxRelay,
)

pytestmark = pytest.mark.integration


async def test_row_too_large_for_its_topic_is_probed_alone_then_parked(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """A row the broker refuses as too large for its topic: its lane cools down once, then
    the row is probed alone and, refused again, parked (ops.outbox_parked), so the rows of
    its lane (its own key's and other keys') go on. The row behind it, which Kafka already
    accepted in the first pass, is on the topic at most twice; every other row once."""
    good, tiny = f"{topic_prefix}outbox.good", f"{topic_prefix}outbox.tiny"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(good, 4, 1),
                NewTopic(tiny, 1, 1, topic_configs={"max.message.bytes": "2000"}),
            ]
        )
    finally:
        await admin.close()
    big = json.dumps({"Blob": "x" * 10_000})
    ids = await write(
        pool,
        [
            OutboxRecord(good, "poisoned", '{"N": 1}'),
            OutboxRecord(tiny, "poisoned", big),  # the broker rejects it
            OutboxRecord(good, "poisoned", '{"N": 3}'),
            *(OutboxRecord(good, f"other-{i}", f'{{"N": {i}}}') for i in range(40)),
        ],
    )
    head, poison, behind = ids[:3]
    async with pool.acquire() as conn:
        lanes = dict(await conn.fetch("SELECT id, lane FROM ops.outbox"))
    same_lane = [i for i in ids if lanes[i] == lanes[poison]]
    held_back = {i for i in same_lane if i >= poison}

    metrics = Metrics()
    clock = ManualClock(datetime.now(UTC))
    relay = OutboxRelay(
        dsn=database_url, bootstrap=kafka_bootstrap, metrics=metrics.outbox, clock=clock
    )
    async with relay:
        # Passes until none finds work: the poisoned lane cools down after its first refusal.
        first = [await relay.run_once() for _ in range(64)]
        assert first[-1].lanes == 0, "the relay went idle with the poisoned lane cooling down"
        async with pool.acquire() as conn:
            unpublished = {
                r["id"]
                for r in await conn.fetch("SELECT id FROM ops.outbox WHERE published_at IS NULL")
            }
        assert unpublished == held_back, "one cool-down: the lane waits for the probe"
        assert head not in unpublished and behind in unpublished
        assert await pool.fetchval("SELECT count(*) FROM ops.outbox_parked") == 0

        # The cool-down is over: the head row alone is sent, refused again, and parked.
        clock.advance(1)
        probe = await relay.run_once()
        assert (probe.lanes, probe.published, probe.failed, probe.more) == (1, 0, 1, True)
        assert probe.parked == 1
        parked = await pool.fetch("SELECT id, reason, refusals FROM ops.outbox_parked")
        assert [tuple(r) for r in parked] == [(poison, "too_large", 2)]
        # The rest of the lane goes on at once, with no cool-down.
        rest = await drain(relay)
    assert rest == len(held_back) - 1
    assert await backlog(pool) == 0
    assert (
        sample(metrics, "reminders_outbox_parked_total", {"topic": tiny, "reason": "too_large"})
        == 1
    )

    received_good = await read_to_end(kafka_bootstrap, good)
    counts = Counter(ids_of(received_good))
    assert counts[behind] <= 2, f"row behind the refused one published {counts[behind]} times"
    assert {i: n for i, n in counts.items() if i != behind} == {
        i: 1 for i in ids if i not in (behind, poison)
    }, "every other row exactly once"
    assert ids_of(await read_to_end(kafka_bootstrap, tiny)) == []
    assert_per_key_order(received_good)
