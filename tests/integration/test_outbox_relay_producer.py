"""Outbox relay on real PostgreSQL and Kafka, its producer in trouble.

- a broker that stops answering for a while (a private broker, SIGSTOPped: what a failover
  looks like to the producer) makes the pass wait for its acknowledgements, holding its
  lanes, and nothing is sent twice;
- a producer that can send no more (closed, sender task gone, out-of-order sequence) is
  replaced and the rows go out;
- a topic without metadata holds back its lane, not the pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest
from aiokafka.structs import TopicPartition

from devkit.harness.outbox import (
    RecordingFactory,
    assert_per_key_order,
    backlog,
    drain,
    held_lanes,
    ids_of,
    lanes_free,
    lanes_of,
    opened,
    restarts,
    sample,
    write,
)
from devkit.kafka import create_topics, read_to_end
from devkit.stacks.private_stack import PrivateStack
from devkit.wait import eventually
from streams.metrics import Metrics
from streams.outbox import OutboxRecord, OutboxRelay, RelayConfig
from streams.outbox.config import PublishTimeout
from streams.outbox.producer import ProducerUnavailable

pytestmark = pytest.mark.integration


async def close_it(producer: Any, topic: str) -> str:
    await producer.stop()
    return "closed"


async def cancel_its_sender(producer: Any, topic: str) -> str:
    # The background task that delivers batches is gone: sends would wait forever.
    task = producer._sender.sender_task
    task.cancel()
    await asyncio.wait([task])
    return "sender_stopped"


async def break_its_sequence(producer: Any, topic: str) -> str:
    # The broker then answers OUT_OF_ORDER_SEQUENCE_NUMBER to every later batch of the
    # partition: an idempotent producer in this state never recovers by itself.
    producer._txn_manager._sequence_numbers[TopicPartition(topic, 0)] += 1000
    return "fatal_error"


async def test_broker_silent_past_the_publish_timeout_pass_waits_and_sends_nothing_twice(
    private_kafka: PrivateStack, database_url: str, pool: asyncpg.Pool, topic_prefix: str
) -> None:
    """A failover seen from the producer: the leader answers nothing for several publish
    timeouts, then answers again. The idempotent producer retries the pass's sends all along;
    a relay that gave up on them at the publish timeout and sent the rows again from a new
    producer published every row twice once the old sends landed."""
    bootstrap = private_kafka.bootstrap
    topic = f"{topic_prefix}outbox.failover"
    await create_topics(bootstrap, [topic])
    publish_timeout = 1.0
    metrics = Metrics()
    factory = RecordingFactory(bootstrap)
    relay = OutboxRelay(
        dsn=database_url,
        producer_factory=factory,
        metrics=metrics.outbox,
        config=RelayConfig(
            publish_timeout=publish_timeout,
            in_doubt_timeout=60.0,
            producer_stop_timeout=1.0,
            max_lanes_per_pass=64,
        ),
    )
    pid = private_kafka.kafka_pid()
    assert pid is not None
    async with opened(relay):
        [warm] = await write(pool, [OutboxRecord(topic, "warm", '{"N": 0}')])
        assert await drain(relay) == 1  # the producer is up and knows the topic
        ids = await write(
            pool, [OutboxRecord(topic, f"key-{i}", f'{{"N": {i}}}') for i in range(1, 31)]
        )
        lanes = set((await lanes_of(pool, ids)).values())
        os.kill(pid, signal.SIGSTOP)
        try:
            silent_pass = asyncio.create_task(relay.run_once())

            async def holding() -> bool:
                return lanes <= await held_lanes(pool)

            await eventually(holding, timeout=5, what="the pass to lock its lanes")
            await asyncio.sleep(3 * publish_timeout)  # the silence a failover lasts
            still_holding = lanes <= await held_lanes(pool) and not await lanes_free(pool, lanes)
        finally:
            os.kill(pid, signal.SIGCONT)

        async def drained() -> bool:
            try:
                await relay.run_once()
            except (PublishTimeout, ProducerUnavailable):
                return False
            return await backlog(pool) == 0

        with contextlib.suppress(PublishTimeout, ProducerUnavailable):
            await asyncio.wait_for(silent_pass, 60)
        await eventually(drained, timeout=60, what="the rows to go out")

    received = await read_to_end(bootstrap, topic)
    assert Counter(ids_of(received)) == Counter([warm, *ids]), "every row exactly once"
    assert_per_key_order(received)
    assert still_holding, "the waiting pass kept its lanes: no other relay could resend them"
    assert sample(metrics, "reminders_outbox_publish_in_doubt_total") == 1
    assert len(factory.made) == 1, "the producer was not replaced"
    assert restarts(metrics, "publish_timeout") == 0


@pytest.mark.parametrize(
    "breakage",
    [close_it, cancel_its_sender, break_its_sequence],
    ids=["closed", "sender_stopped", "out_of_order_sequence"],
)
async def test_producer_that_can_send_no_more_is_replaced(
    breakage: Callable[[Any, str], Awaitable[str]],
    database_url: str,
    pool: asyncpg.Pool,
    kafka_bootstrap: str,
    topic_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = f"{topic_prefix}outbox.fatal"
    await create_topics(kafka_bootstrap, [topic], partitions=1)
    factory = RecordingFactory(kafka_bootstrap)
    metrics = Metrics()
    relay = OutboxRelay(
        dsn=database_url,
        producer_factory=factory,
        metrics=metrics.outbox,
        config=RelayConfig(publish_timeout=5),
    )
    caplog.set_level(logging.WARNING, logger="streams.outbox.relay")
    async with opened(relay):
        [warm] = await write(pool, [OutboxRecord(topic, "warm", '{"N": 0}')])
        assert await drain(relay) == 1
        reason = await breakage(factory.made[0], topic)
        ids = await write(
            pool, [OutboxRecord(topic, f"key-{i % 7}", f'{{"N": {i}}}') for i in range(1, 31)]
        )
        # Bounded: a relay still using a producer whose sender is gone would wait forever.
        published = await asyncio.wait_for(drain(relay), 60)

    assert published == len(ids), "every row went out through the new producer"
    assert await backlog(pool) == 0
    assert len(factory.made) == 2, "exactly one replacement"
    assert restarts(metrics, reason) == 1
    assert "action=outbox_producer_replaced" in caplog.text
    assert f"reason={reason}" in caplog.text
    received = await read_to_end(kafka_bootstrap, topic)
    assert sorted(set(ids_of(received))) == [warm, *ids]
    assert_per_key_order(received)


async def test_topic_without_metadata_holds_back_its_lane_without_stalling_the_pass(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """A topic name Kafka cannot resolve (here an invalid one; in production a topic that
    does not exist with auto-creation off): aiokafka waits request_timeout_ms (40 s) for its
    metadata. The pass gives it half the publish timeout, then holds back only that lane
    (until OUTBOX_PARK_UNKNOWN_TOPIC_AFTER_SECONDS parks the row: test_outbox_parking.py)."""
    good, bad = f"{topic_prefix}outbox.good", f"{topic_prefix}outbox bad!"
    await create_topics(kafka_bootstrap, [good])
    ids = await write(
        pool,
        [
            OutboxRecord(bad, "stuck", '{"N": 0}'),
            OutboxRecord(good, "stuck", '{"N": 1}'),
            *(OutboxRecord(good, f"key-{i}", f'{{"N": {i}}}') for i in range(2, 42)),
        ],
    )
    lane_of = await lanes_of(pool, ids)
    stuck = [i for i in ids if lane_of[i] == lane_of[ids[0]]]
    publish_timeout = 2.0
    relay = OutboxRelay(
        dsn=database_url,
        bootstrap=kafka_bootstrap,
        metrics=Metrics().outbox,
        config=RelayConfig(publish_timeout=publish_timeout),
    )
    async with opened(relay):
        published = 0
        for _ in range(64):
            started = time.monotonic()
            result = await asyncio.wait_for(relay.run_once(), publish_timeout + 5)
            assert time.monotonic() - started < publish_timeout, "no pass waits out the timeout"
            published += result.published
            if result.lanes == 0:
                break
    assert published == len(ids) - len(stuck)
    assert await backlog(pool) == len(stuck)
    received = await read_to_end(kafka_bootstrap, good)
    assert sorted(ids_of(received)) == sorted(set(ids) - set(stuck))
