"""Outbox relay on real PostgreSQL and Kafka: delivery and order, a killed relay, two relays."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections import defaultdict
from pathlib import Path

import asyncpg
import pytest

from db.connector import transaction
from devkit.harness.outbox import (
    assert_per_key_order,
    backlog,
    backlog_at_most,
    drain,
    ids_of,
    new_relay,
    running,
    sample,
    topic_size,
    write,
)
from devkit.kafka import create_topics, read_to_end
from devkit.wait import eventually
from streams.metrics import Metrics
from streams.outbox import (
    OutboxRecord,
    insert_many,
    outbox_id_of,
)

pytestmark = pytest.mark.integration

PROJECT_ROOT = Path(__file__).resolve().parents[2]


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
    assert sample(metrics, "reminders_outbox_published_total", {"topic": topic}) == 1000
    assert sample(metrics, "reminders_outbox_publish_lag_seconds_count") == 1000
    assert sample(metrics, "reminders_outbox_publish_errors_total") == 0


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
    published_a = sample(metrics_a, "reminders_outbox_published_total", {"topic": topic})
    published_b = sample(metrics_b, "reminders_outbox_published_total", {"topic": topic})
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
