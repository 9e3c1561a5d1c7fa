"""Outbox relay against a sick Kafka and a paused relay: real PostgreSQL, real Kafka.

- a producer that can send no more (closed, sender task gone, out-of-order sequence) is
  replaced and the rows go out;
- a broker that stops answering for a while (a private broker, SIGSTOPped: what a failover
  looks like to the producer) makes the pass wait for its acknowledgements, holding its
  lanes, and nothing is sent twice;
- a broker that stays silent ends the pass within the in-doubt bound, releases its lanes,
  aborts the producer and leaves the rows for later, with the same outbox-id;
- a relay paused in the middle of a pass holds at most ``max_lanes_per_pass`` lanes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka.structs import TopicPartition

import db.outbox as repo
from devkit.kafka import create_topics, read_to_end
from devkit.stacks.private_stack import PrivateStack
from devkit.wait import eventually
from streams.metrics import Metrics
from streams.outbox import OutboxRecord, OutboxRelay, Producer, RelayConfig
from streams.outbox.config import DEFAULT_MAX_LANES_PER_PASS, PublishTimeout
from streams.outbox.producer import ProducerUnavailable, kafka_producer_factory
from streams.outbox.records import KafkaHeaders
from tests.integration.test_outbox_relay import (
    assert_per_key_order,
    backlog,
    drain,
    ids_of,
    sample,
    write,
)

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------------------- helpers


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
    return sample(metrics, "outbox_producer_restarts_total", {"reason": reason})


@asynccontextmanager
async def opened(relay: OutboxRelay) -> AsyncIterator[OutboxRelay]:
    async with relay:
        yield relay


# ---------------------------------------------------------------------------- fatal producer


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
    assert sample(metrics, "outbox_publish_in_doubt_total") == 1
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


# ---------------------------------------------------------------------------- unresponsive broker


@pytest.fixture
def private_kafka(tmp_path: Path) -> Iterator[PrivateStack]:
    """A broker of this test only, so that it can be frozen (its PostgreSQL is unused)."""
    stack = PrivateStack(tmp_path).up()
    try:
        yield stack
    finally:
        pid = stack.kafka_pid()
        if pid is not None:  # never leave it stopped: `down` could not end it
            os.kill(pid, signal.SIGCONT)
        stack.down()


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
    assert sample(metrics, "outbox_publish_in_doubt_total") == 1
    assert start_failed_after <= publish_timeout + stop_timeout + 1.5, start_failed_after
    received = await read_to_end(bootstrap, topic)
    seen = ids_of(received)
    assert sorted(set(seen)) == [warm, *ids], "every row reached the topic"
    # Sends of the abandoned pass may land after all: only as re-publishes, same outbox-id.
    repeated = {i for i, n in Counter(seen).items() if n > 1}
    assert repeated <= set(ids)
    assert_per_key_order(received)


# ---------------------------------------------------------------------------- paused relay


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


# ---------------------------------------------------------------------------- Kafka down at start


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
