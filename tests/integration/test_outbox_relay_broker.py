"""Outbox relay on real PostgreSQL and Kafka, the broker gone.

- a broker that stays silent ends the pass within the in-doubt bound, releases its lanes,
  aborts the producer and leaves the rows for later, with the same outbox-id;
- a relay started while Kafka is down publishes once it is up.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections import Counter

import asyncpg
import pytest

from devkit.harness.outbox import (
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
from streams.outbox.producer import ProducerUnavailable, kafka_producer_factory

pytestmark = pytest.mark.integration


@pytest.mark.timeout(600)  # private stack up (up to 300 s) and down (120 s) + its waits
async def test_unresponsive_broker_pass_ends_within_bound_and_releases_its_lanes(
    private_kafka: PrivateStack, database_url: str, pool: asyncpg.Pool, topic_prefix: str
) -> None:
    bootstrap = private_kafka.bootstrap
    topic = f"{topic_prefix}outbox.frozen"
    await create_topics(bootstrap, [topic])
    publish_timeout, in_doubt_timeout, stop_timeout = 1.0, 2.5, 1.0
    metrics = Metrics()
    relay = OutboxRelay(
        dsn=database_url,
        bootstrap=bootstrap,
        metrics=metrics.outbox,
        config=RelayConfig(
            publish_timeout=publish_timeout,
            in_doubt_timeout=in_doubt_timeout,
            producer_stop_timeout=stop_timeout,
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
            started = time.monotonic()
            frozen_pass = asyncio.create_task(relay.run_once())

            async def holding() -> bool:
                return lanes <= await held_lanes(pool)

            await eventually(holding, timeout=5, what="the pass to lock its lanes")
            assert not await lanes_free(pool, lanes)

            async def released() -> bool:
                return not (await held_lanes(pool)) & lanes

            await eventually(
                released, timeout=in_doubt_timeout + 3, what="the pass to release its lanes"
            )
            released_after = time.monotonic() - started
            with pytest.raises(PublishTimeout):
                await asyncio.wait_for(frozen_pass, stop_timeout + 3)
            ended_after = time.monotonic() - started
            assert await lanes_free(pool, lanes), "another relay can take every lane now"
            assert await backlog(pool) == len(ids), "nothing was marked published"
            assert restarts(metrics, "publish_timeout") == 1

            # While the broker stays silent a new producer cannot start: bounded, no lanes.
            again = time.monotonic()
            with pytest.raises(ProducerUnavailable):
                await asyncio.wait_for(relay.run_once(), publish_timeout + stop_timeout + 3)
            start_failed_after = time.monotonic() - again
            assert await held_lanes(pool) == set()
        finally:
            os.kill(pid, signal.SIGCONT)

        async def drained() -> bool:
            try:
                await relay.run_once()
            except (PublishTimeout, ProducerUnavailable):
                return False
            return await backlog(pool) == 0

        await eventually(drained, timeout=60, what="the rows to go out once Kafka answers")

    assert publish_timeout < released_after <= in_doubt_timeout + 1.5, released_after
    assert ended_after <= in_doubt_timeout + stop_timeout + 1.5, ended_after
    assert sample(metrics, "reminders_outbox_publish_in_doubt_total") == 1
    assert start_failed_after <= publish_timeout + stop_timeout + 1.5, start_failed_after
    received = await read_to_end(bootstrap, topic)
    seen = ids_of(received)
    assert sorted(set(seen)) == [warm, *ids], "every row reached the topic"
    # Sends of the abandoned pass may land after all: only as re-publishes, same outbox-id.
    repeated = {i for i, n in Counter(seen).items() if n > 1}
    assert repeated <= set(ids)
    assert_per_key_order(received)


async def test_relay_starts_while_kafka_is_down_and_publishes_once_it_is_up(
    database_url: str,
    pool: asyncpg.Pool,
    kafka_bootstrap: str,
    topic_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The relay of a timer process must not stop it from starting (its schedules need only
    PostgreSQL): start() succeeds with nothing listening; the passes publish once Kafka is up."""
    from devkit.stacks.proxy import TcpProxy
    from devkit.workers import free_port

    topic = f"{topic_prefix}outbox.late_kafka"
    await create_topics(kafka_bootstrap, [topic], partitions=1)
    host, _, port = kafka_bootstrap.rpartition(":")
    proxy = TcpProxy(free_port(), host, int(port))  # nothing listens until proxy.start()
    relay = OutboxRelay(
        dsn=database_url,
        producer_factory=kafka_producer_factory(f"127.0.0.1:{proxy.port}"),
        metrics=Metrics().outbox,
        config=RelayConfig(publish_timeout=2, poll_interval=0.2),
    )
    caplog.set_level(logging.WARNING, logger="streams.outbox.relay")
    ids = await write(pool, [OutboxRecord(topic, f"key-{i}", f'{{"N": {i}}}') for i in range(5)])
    await relay.start()
    try:
        assert "action=outbox_relay_start_without_kafka" in caplog.text
        assert await backlog(pool) == len(ids), "nothing can go out while Kafka is down"
        proxy.start()
        await eventually(lambda: backlog(pool), until=lambda n: n == 0, timeout=60, what="sent")
    finally:
        await relay.stop()
        proxy.stop()
    received = await read_to_end(kafka_bootstrap, topic)
    assert sorted(set(ids_of(received))) == ids
