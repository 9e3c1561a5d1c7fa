"""Outbox relay against real PostgreSQL and real Kafka: delivery, order, crashes, concurrency."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import ConsumerRecord, TopicPartition

import db.outbox as repo
from db.connector import transaction
from devkit.kafka import consume, create_topics, read_to_end
from devkit.wait import eventually
from streams.clock import ManualClock, SystemClock
from streams.maintenance import OutboxRetention, RetentionConfig
from streams.metrics import Metrics
from streams.outbox import (
    OutboxRecord,
    OutboxRelay,
    RelayConfig,
    insert_many,
    outbox_id_of,
)
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

PROJECT_ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------- helpers


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


# ---------------------------------------------------------------------------- delivery & order


async def test_rows_appear_with_key_headers_payload_and_per_key_order(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}outbox.order"
    await create_topics(kafka_bootstrap, [topic])
    keys = [f"key-{k}" for k in range(7)]
    # Odd spacing and non-ASCII: the payload must reach Kafka byte for byte as stored.
    records = [
        OutboxRecord(
            topic,
            keys[i % 7],
            f'{{"Key": "{keys[i % 7]}",  "Seq": {i}, "Text": "é✓"}}',
            {"event-type": "Test", "seq": str(i)},
        )
        for i in range(1000)
    ]
    metrics = Metrics()
    relay = new_relay(database_url, kafka_bootstrap, metrics, batch_size=64)
    async with running(relay):
        ids = await write(pool, records, per_tx=100)
        # A rolled-back transaction's rows must never be published.
        with pytest.raises(RuntimeError):
            async with transaction(pool) as conn:
                await insert_many(conn, [OutboxRecord(topic, "ghost", '{"Ghost": true}')])
                raise RuntimeError("state change failed")
        await eventually(backlog_at_most(pool, 0), timeout=60, what="rows marked")
    # Every row is marked (acknowledged) and the relay stopped: the topic is complete.
    received = await read_to_end(kafka_bootstrap, topic)

    assert len(received) == 1000
    assert sorted(ids_of(received)) == ids
    # Each row remembers where Kafka put it (explain's lineage).
    placed = {(r.partition, r.offset) for r in received}
    marked = await pool.fetch("SELECT published_partition, published_offset FROM ops.outbox")
    assert {(m["published_partition"], m["published_offset"]) for m in marked} == placed
    by_id = dict(zip(ids, records, strict=True))
    for rec in received:
        outbox_id = outbox_id_of(list(rec.headers))
        assert outbox_id is not None
        sent = by_id[outbox_id]
        assert rec.key == sent.key.encode()
        assert rec.value == sent.payload.encode("utf-8")
        headers = list(rec.headers)
        assert headers[0] == ("outbox-id", str(outbox_id).encode())
        # jsonb keeps no key order, so the row's own headers are compared as a mapping.
        assert dict(headers[1:]) == {"event-type": b"Test", "seq": sent.headers["seq"].encode()}
    per_key: dict[bytes | None, list[int]] = defaultdict(list)
    for rec in received:
        per_key[rec.key].append(json.loads(rec.value or b"")["Seq"])
    assert set(per_key) == {k.encode() for k in keys}
    for seqs in per_key.values():
        assert seqs == sorted(seqs)
    assert sample(metrics, "outbox_published_total", {"topic": topic}) == 1000
    assert sample(metrics, "outbox_publish_lag_seconds_count") == 1000
    assert sample(metrics, "outbox_publish_errors_total") == 0


@pytest.mark.timeout(360)  # waits of 60 + 60 + 120 + 30 s and a 60 s read
async def test_relay_killed_mid_batch_and_restarted_loses_nothing(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    topic = f"{topic_prefix}outbox.kill"
    await create_topics(kafka_bootstrap, [topic])
    total = 20_000
    ids = await write(
        pool, [OutboxRecord(topic, f"key-{i % 50}", f'{{"Seq": {i}}}') for i in range(total)]
    )
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "KAFKA_BOOTSTRAP": kafka_bootstrap,
        "OUTBOX_BATCH_SIZE": "200",
        "LOG_LEVEL": "info",
    }

    async def spawn(log_name: str) -> asyncio.subprocess.Process:
        log = (tmp_path / log_name).open("wb")
        try:
            return await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "streams.outbox",
                cwd=PROJECT_ROOT,
                env=env,
                stdout=log,
                stderr=log,
            )
        finally:
            log.close()  # the child has its own descriptor

    first = await spawn("relay-1.log")
    try:
        await eventually(
            backlog_at_most(pool, total - 2000), timeout=60, what="first relay publishing"
        )
        # Freeze the relay until it is caught between producing and committing: more
        # records on the topic than rows marked published. Then kill it right there.
        on_topic = marked = 0

        async def frozen_between_produce_and_commit() -> bool:
            nonlocal on_topic, marked
            first.send_signal(signal.SIGSTOP)
            on_topic = await topic_size(kafka_bootstrap, topic)
            marked = total - await backlog(pool)
            if on_topic > marked:
                return True
            first.send_signal(signal.SIGCONT)
            assert marked < total, "the relay published everything before it was caught"
            return False

        await eventually(
            frozen_between_produce_and_commit,
            timeout=60,
            what="the relay frozen between produce and commit",
            interval=0.005,
        )
    finally:
        first.kill()
        await first.wait()
    assert marked < total, "the first relay was killed while rows were still flowing"
    in_flight = on_topic - marked

    second = await spawn("relay-2.log")
    try:
        await eventually(backlog_at_most(pool, 0), timeout=120, what="second relay")
    finally:
        second.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(second.wait(), 30)
    assert rc == 0, (tmp_path / "relay-2.log").read_text()

    received = await read_to_end(kafka_bootstrap, topic)
    seen = ids_of(received)
    assert set(seen) == set(ids), "every row reached the topic at least once"
    # The rows in flight at the kill were re-published: at-least-once, same outbox-id.
    assert len(seen) - len(set(seen)) >= in_flight
    assert_per_key_order(received)


async def test_two_relays_at_once_publish_each_row_once(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}outbox.pair"
    await create_topics(kafka_bootstrap, [topic])
    total = 4000
    metrics_a, metrics_b = Metrics(), Metrics()
    # Few lanes per pass so that both relays get lanes while the other holds some.
    config = {"batch_size": 40, "max_lanes_per_pass": 8, "poll_interval": 0.2}
    relay_a = new_relay(database_url, kafka_bootstrap, metrics_a, **config)
    relay_b = new_relay(database_url, kafka_bootstrap, metrics_b, **config)
    async with running(relay_a), running(relay_b):
        ids = await write(
            pool,
            [OutboxRecord(topic, f"key-{i % 200}", f'{{"Seq": {i}}}') for i in range(total)],
            per_tx=500,
        )
        await eventually(backlog_at_most(pool, 0), timeout=60, what="both relays")
    received = await read_to_end(kafka_bootstrap, topic)

    seen = ids_of(received)
    assert len(seen) == total
    assert sorted(seen) == ids, "each outbox-id exactly once"
    assert_per_key_order(received)
    published_a = sample(metrics_a, "outbox_published_total", {"topic": topic})
    published_b = sample(metrics_b, "outbox_published_total", {"topic": topic})
    assert published_a > 0 and published_b > 0, "both relays took part"
    assert published_a + published_b == total


async def test_row_whose_transaction_commits_late_is_still_published(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}outbox.late"
    await create_topics(kafka_bootstrap, [topic])
    relay = new_relay(database_url, kafka_bootstrap)
    async with relay, pool.acquire() as conn_a:
        tx_a = conn_a.transaction()
        await tx_a.start()
        try:
            [late_id] = await insert_many(conn_a, [OutboxRecord(topic, "late", '{"N": 1}')])
            async with transaction(pool) as conn_b:
                [early_id] = await insert_many(conn_b, [OutboxRecord(topic, "early", '{"N": 2}')])
            assert late_id < early_id

            first = await relay.run_once()
            assert first.published == 1
            # The pass waited for Kafka's ack: the topic holds exactly what it published.
            assert ids_of(await read_to_end(kafka_bootstrap, topic)) == [early_id]
        finally:
            await tx_a.commit()

        assert await drain(relay) == 1
    received = await read_to_end(kafka_bootstrap, topic)
    assert sorted(ids_of(received)) == [late_id, early_id]
    assert await backlog(pool) == 0


# ---------------------------------------------------------------------------- wake-up


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


# ---------------------------------------------------------------------------- failures


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
    assert sample(metrics, "outbox_parked_total", {"topic": tiny, "reason": "too_large"}) == 1

    received_good = await read_to_end(kafka_bootstrap, good)
    counts = Counter(ids_of(received_good))
    assert counts[behind] <= 2, f"row behind the refused one published {counts[behind]} times"
    assert {i: n for i, n in counts.items() if i != behind} == {
        i: 1 for i in ids if i not in (behind, poison)
    }, "every other row exactly once"
    assert ids_of(await read_to_end(kafka_bootstrap, tiny)) == []
    assert_per_key_order(received_good)


# ---------------------------------------------------------------------------- metrics & retention


async def test_backlog_and_oldest_age_gauges(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}outbox.gauges"
    await create_topics(kafka_bootstrap, [topic])
    await write(pool, [OutboxRecord(topic, f"k{i}", "{}") for i in range(25)])
    metrics = Metrics()
    clock = ManualClock(datetime.now(UTC) + timedelta(hours=1))
    relay = OutboxRelay(
        dsn=database_url, bootstrap=kafka_bootstrap, metrics=metrics.outbox, clock=clock
    )
    async with relay:
        found = await relay.refresh_metrics()
        assert found.count == 25
        assert sample(metrics, "outbox_backlog") == 25
        assert 3590 < sample(metrics, "outbox_oldest_unpublished_age_seconds") < 3700

        assert await drain(relay) == 25
        await relay.refresh_metrics()
    assert sample(metrics, "outbox_backlog") == 0
    assert sample(metrics, "outbox_oldest_unpublished_age_seconds") == 0
    # Lag is measured on the relay's clock: created (now) -> acknowledged (clock, +1 h).
    assert sample(metrics, "outbox_publish_lag_seconds_count") == 25
    assert 3590 * 25 < sample(metrics, "outbox_publish_lag_seconds_sum") < 3700 * 25


async def test_retention_deletes_published_rows_in_chunks(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}outbox.retention"
    await create_topics(kafka_bootstrap, [topic])
    published_at = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    await write(pool, [OutboxRecord(topic, f"k{i}", "{}") for i in range(10)])
    metrics = Metrics()
    relay = OutboxRelay(
        dsn=database_url,
        bootstrap=kafka_bootstrap,
        metrics=metrics.outbox,
        clock=ManualClock(published_at),
    )
    async with relay:
        assert await drain(relay) == 10
    unpublished = await write(pool, [OutboxRecord(topic, "later", "{}") for _ in range(2)])

    retention = OutboxRetention(
        pool,
        metrics=metrics.outbox,
        config=RetentionConfig(retention=timedelta(hours=24), chunk_size=3),
    )
    early = await retention.run_once(
        RunContext.at(published_at + timedelta(hours=23), clock=SystemClock())
    )
    assert (early.deleted, early.chunks, early.more) == (0, 1, False)

    due = published_at + timedelta(hours=24, seconds=1)
    drained = await retention.run_once(
        RunContext.at(due, clock=SystemClock())
    )  # to the horizon in one run, 3 rows a chunk
    assert (drained.deleted, drained.chunks, drained.more) == (10, 4, False)
    assert sample(metrics, "outbox_deleted_total") == 10
    async with pool.acquire() as conn:
        left = [r["id"] for r in await conn.fetch("SELECT id FROM ops.outbox ORDER BY id")]
    assert left == unpublished, "unpublished rows are never deleted"


async def test_a_pass_takes_the_lanes_whose_oldest_rows_waited_longest(
    pool: asyncpg.Pool, topic_prefix: str
) -> None:
    """A pass locks only some lanes; the ones it leaves are the ones that waited least, so a
    lane is never passed over again and again by chance (a reminder's lateness)."""
    topic = f"{topic_prefix}outbox.lanes"
    ids = await write(pool, [OutboxRecord(topic, f"key-{i}", "{}") for i in range(40)])
    lane_of = {
        r["id"]: r["lane"]
        for r in await pool.fetch("SELECT id, lane FROM ops.outbox WHERE id = ANY($1)", ids)
    }
    by_age: list[int] = []
    for i in ids:  # lanes in the order of their oldest row
        if lane_of[i] not in by_age:
            by_age.append(lane_of[i])
    assert len(by_age) > 8
    async with repo.lane_transaction(pool) as conn:
        first = await repo.lanes_lock(conn, exclude=[], limit=4)
        # another relay at the same time gets the next oldest, not the ones held
        async with repo.lane_transaction(pool) as other:
            second = await repo.lanes_lock(other, exclude=[], limit=4)
    assert first == sorted(by_age[:4])
    assert second == sorted(by_age[4:8])
