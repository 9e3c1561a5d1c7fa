"""Outbox relay on real PostgreSQL and Kafka: backlog gauges, retention, lane order of a pass."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

import db.outbox as repo
from devkit.harness.outbox import (
    drain,
    sample,
    write,
)
from devkit.kafka import create_topics
from streams.clock import ManualClock, SystemClock
from streams.maintenance import OutboxRetention, RetentionConfig
from streams.metrics import Metrics
from streams.outbox import (
    OutboxRecord,
    OutboxRelay,
)
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration


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
        assert sample(metrics, "reminders_outbox_backlog") == 25
        assert 3590 < sample(metrics, "reminders_outbox_oldest_unpublished_age_seconds") < 3700

        assert await drain(relay) == 25
        await relay.refresh_metrics()
    assert sample(metrics, "reminders_outbox_backlog") == 0
    assert sample(metrics, "reminders_outbox_oldest_unpublished_age_seconds") == 0
    # Lag is measured on the relay's clock: created (now) -> acknowledged (clock, +1 h).
    assert sample(metrics, "reminders_outbox_publish_lag_seconds_count") == 25
    assert 3590 * 25 < sample(metrics, "reminders_outbox_publish_lag_seconds_sum") < 3700 * 25


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
    assert sample(metrics, "reminders_outbox_deleted_total") == 10
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
