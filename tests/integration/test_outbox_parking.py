"""Rows Kafka refuses for good are parked, real PostgreSQL and real Kafka: the keys behind
them keep flowing; metrics, /status and ``python -m streams outbox`` show, retry and drop them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from devkit.harness.outbox import assert_per_key_order, ids_of, sample, write
from devkit.kafka import create_topics, read_to_end
from devkit.stacks.private_stack import PrivateStack
from devkit.wait import eventually
from devkit.workers import ROOT
from streams.contracts import REMINDER_DUE
from streams.metrics import Metrics
from streams.outbox import OutboxRecord, OutboxRelay, RelayConfig
from streams.outbox.limits import topics_below_limit
from streams.settings import Settings
from streams.web.status import outbox_stats

pytestmark = pytest.mark.integration

TOPIC_LIMIT = 2000  # the tiny topic's max.message.bytes
# Rows of other keys behind a parked row are published within this (asserted and printed).
BEHIND_WITHIN = 20.0


def cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", "outbox", *args],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def keys_in_lane(pool: asyncpg.Pool, lane: int, prefix: str, n: int) -> list[str]:
    """``n`` keys whose rows land in ``lane`` (the table computes lanes as hashtext(key) & 63)."""
    rows = await pool.fetch(
        "SELECT k FROM (SELECT $2 || g AS k FROM generate_series(1, 10000) g) s "
        "WHERE (hashtext(k) & 63) = $1 LIMIT $3",
        lane,
        prefix,
        n,
    )
    return [str(r["k"]) for r in rows]


async def lane_of_key(pool: asyncpg.Pool, key: str) -> int:
    return int(await pool.fetchval("SELECT hashtext($1) & 63", key))


async def unpublished_keys(pool: asyncpg.Pool, ids: list[int]) -> list[str]:
    """Keys of those of ``ids`` that are not published yet (what the failure names)."""
    rows = await pool.fetch(
        "SELECT key FROM ops.outbox WHERE id = ANY($1) AND published_at IS NULL ORDER BY id", ids
    )
    return [str(r["key"]) for r in rows]


async def parked_ids(pool: asyncpg.Pool) -> dict[int, str]:
    rows = await pool.fetch("SELECT id, reason FROM ops.outbox_parked ORDER BY id")
    return {int(r["id"]): str(r["reason"]) for r in rows}


async def topic_limit(bootstrap: str, topic: str) -> str:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        entries = response.resources[0][4]
        return str(next(e[1] for e in entries if e[0] == "max.message.bytes"))
    finally:
        await admin.close()


@pytest.mark.timeout(240)
async def test_rows_kafka_refuses_for_good_are_parked_and_keys_behind_them_flow(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """One row too large for its topic and one for a topic Kafka cannot resolve (an invalid
    name: the shared broker auto-creates valid ones; to the relay it is the same "no metadata
    within the bound" as a missing topic with auto-create off). Both are parked with their
    reason within seconds, and the rows of other keys in their lanes (and a later row of the
    large row's own key) are published within BEHIND_WITHIN seconds. Then the CLI lists
    them, retries the large one once its topic allows it (same outbox-id) and drops the
    other."""
    good, tiny = f"{topic_prefix}outbox.good", f"{topic_prefix}outbox.tiny"
    bad = f"{topic_prefix}outbox missing!"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(good, 4, 1),
                NewTopic(tiny, 1, 1, topic_configs={"max.message.bytes": str(TOPIC_LIMIT)}),
            ]
        )
    finally:
        await admin.close()

    big_lane = await lane_of_key(pool, "big-owner")
    lost_lane = await lane_of_key(pool, "lost-key")
    assert big_lane != lost_lane
    behind_big = await keys_in_lane(pool, big_lane, "behind-big-", 5)
    behind_lost = await keys_in_lane(pool, lost_lane, "behind-lost-", 5)
    [big, lost] = await write(
        pool,
        [
            OutboxRecord(tiny, "big-owner", json.dumps({"Blob": "x" * 10_000})),
            OutboxRecord(bad, "lost-key", '{"N": 0}'),
        ],
    )
    behind = await write(
        pool,
        [
            *(OutboxRecord(good, k, '{"N": 1}') for k in behind_big + behind_lost),
            OutboxRecord(good, "big-owner", '{"N": 2}'),  # a later row of the parked key
            *(OutboxRecord(good, f"other-{i}", f'{{"N": {i}}}') for i in range(40)),
        ],
    )
    later_of_big = behind[len(behind_big) + len(behind_lost)]
    # Another row for the missing topic, behind the first in its lane: the wait is the
    # topic's, so it is parked on its first refusal once it heads the lane.
    [lost_again] = await write(pool, [OutboxRecord(bad, "lost-key", '{"N": 3}')])

    metrics = Metrics()
    relay = OutboxRelay(
        dsn=database_url,
        bootstrap=kafka_bootstrap,
        metrics=metrics.outbox,
        config=RelayConfig(publish_timeout=2.0, park_topic_wait=3.0, poll_interval=0.2),
    )
    big_lane_ids = [*behind[: len(behind_big)], later_of_big]
    started = time.monotonic()
    await relay.start()
    try:
        await eventually(
            lambda: unpublished_keys(pool, big_lane_ids),
            until=lambda keys: keys == [],
            timeout=BEHIND_WITHIN + 40,
            what="the rows behind the too-large row published",
        )
        behind_big_after = time.monotonic() - started
        await eventually(
            lambda: unpublished_keys(pool, behind),
            until=lambda keys: keys == [],
            timeout=BEHIND_WITHIN + 40,
            what="every row behind the refused ones published",
        )
        behind_after = time.monotonic() - started
        await eventually(
            lambda: parked_ids(pool),
            until=lambda p: len(p) == 3,
            timeout=30,
            what="both refused rows parked",
        )
        parked_after = time.monotonic() - started
        print(
            f"\nkeys behind the too-large row published within {behind_big_after:.1f}s, "
            f"behind both refused rows within {behind_after:.1f}s (park_topic_wait 3 s); "
            f"all three refused rows parked within {parked_after:.1f}s"
        )
        assert behind_after < BEHIND_WITHIN, f"rows behind waited {behind_after:.1f}s"
        assert await parked_ids(pool) == {
            big: "too_large",
            lost: "unknown_topic",
            lost_again: "unknown_topic",
        }
        assert (
            await pool.fetchval("SELECT refusals FROM ops.outbox_parked WHERE id = $1", lost_again)
            == 1
        ), "the topic had waited already: parked on its first refusal"
        assert (
            await pool.fetchval(
                "SELECT count(*) FROM ops.outbox WHERE id = ANY($1)", [big, lost, lost_again]
            )
            == 0
        )

        # Counted, and shown on /status.
        await relay.refresh_metrics()
        assert sample(metrics, "reminders_outbox_parked_rows") == 3
        assert (
            sample(metrics, "reminders_outbox_parked_total", {"topic": tiny, "reason": "too_large"})
            == 1
        )
        assert (
            sample(
                metrics, "reminders_outbox_parked_total", {"topic": bad, "reason": "unknown_topic"}
            )
            == 2
        )
        status = outbox_stats(SimpleNamespace(metrics=metrics))  # type: ignore[arg-type]
        assert status["parked"] == 3
        assert status["parked_by_reason"] == {"too_large": 1, "unknown_topic": 2}
        assert status["backlog"] == 0

        # Listed by the CLI (no payloads).
        listed = cli(database_url, "parked", "--format", "json")
        assert listed.returncode == 0, listed.stderr
        rows: list[dict[str, Any]] = json.loads(listed.stdout)
        assert [(r["id"], r["reason"], r["topic"]) for r in rows] == [
            (big, "too_large", tiny),
            (lost, "unknown_topic", bad),
            (lost_again, "unknown_topic", bad),
        ]
        assert all("payload" not in r for r in rows)
        assert rows[0]["error"] in {"MessageSizeTooLargeError", "RecordTooLargeError"}
        assert "x" * 100 not in listed.stdout

        # The topic is fixed; retry sends the row with its own outbox-id. (The broker applies
        # a topic config change a moment after it reports it, so a retry sent in between is
        # refused and parked again: retry once more, as an operator would.)
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            await admin.alter_configs(
                [
                    ConfigResource(
                        ConfigResourceType.TOPIC, tiny, configs={"max.message.bytes": "1048588"}
                    )
                ]
            )
        finally:
            await admin.close()
        await eventually(
            lambda: topic_limit(kafka_bootstrap, tiny),
            until=lambda v: v == "1048588",
            timeout=30,
            what="the topic's new limit",
        )
        for attempt in range(5):
            retried = cli(database_url, "retry", str(big))
            assert retried.returncode == 0, retried.stderr
            outcome = await eventually(
                lambda: pool.fetchval(
                    "SELECT CASE WHEN EXISTS (SELECT 1 FROM ops.outbox_parked WHERE id = $1) "
                    "THEN 'parked' WHEN EXISTS (SELECT 1 FROM ops.outbox "
                    "WHERE id = $1 AND published_at IS NOT NULL) THEN 'published' END",
                    big,
                ),
                timeout=30,
                what="the retried row published or parked again",
            )
            if outcome == "published":
                break
            assert attempt < 4, "the retried row was parked again every time"

        # Dropped: gone for good; a second drop or retry finds nothing.
        for doomed in (lost, lost_again):
            dropped = cli(database_url, "drop", str(doomed))
            assert dropped.returncode == 0, dropped.stderr
        assert await parked_ids(pool) == {}
        assert cli(database_url, "retry", str(lost)).returncode == 1
        assert cli(database_url, "drop", str(lost)).returncode == 1
        await relay.refresh_metrics()
        assert sample(metrics, "reminders_outbox_parked_rows") == 0
    finally:
        await relay.stop()

    on_tiny = await read_to_end(kafka_bootstrap, tiny)
    assert ids_of(on_tiny) == [big], "the retried row, with its original outbox-id"
    on_good = await read_to_end(kafka_bootstrap, good)
    assert sorted(set(ids_of(on_good))) == sorted(behind)
    assert_per_key_order(on_good)
    # The documented order: the parked row's key went on without it.
    assert later_of_big in ids_of(on_good) and later_of_big > big


async def test_the_producer_limit_is_the_setting_and_topics_below_it_are_reported(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """OUTBOX_MAX_RECORD_BYTES is the relay producer's limit (aiokafka's own is 1 MiB): a
    1.5 MB row goes out to a topic that takes 3 MB; a 2.5 MB row is refused by the producer
    itself and parked at once. A produced topic whose max.message.bytes is below the setting
    is reported when the relay starts."""
    roomy = f"{topic_prefix}outbox.roomy"
    reminder_due = f"{topic_prefix}{REMINDER_DUE.name}"  # the broker's default limit
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(roomy, 1, 1, topic_configs={"max.message.bytes": "3000000"}),
                NewTopic(reminder_due, 1, 1),
            ]
        )
    finally:
        await admin.close()
    settings = Settings(
        database_url=database_url,
        kafka_bootstrap=kafka_bootstrap,
        topic_prefix=topic_prefix,
        outbox_max_record_bytes=2_000_000,
    )
    below = await topics_below_limit(settings, settings.outbox_max_record_bytes)
    assert below == [(reminder_due, 1048588)]

    [fits, too_big] = await write(
        pool,
        [
            OutboxRecord(roomy, "k1", json.dumps({"Blob": "x" * 1_500_000})),
            OutboxRecord(roomy, "k2", json.dumps({"Blob": "x" * 2_500_000})),
        ],
    )
    metrics = Metrics()
    relay = OutboxRelay.from_settings(settings, metrics=metrics.outbox)
    async with relay:
        results = [await relay.run_once() for _ in range(3)]
    assert sum(r.published for r in results) == 1
    assert await parked_ids(pool) == {too_big: "too_large"}
    refusals = await pool.fetchval("SELECT refusals FROM ops.outbox_parked WHERE id = $1", too_big)
    assert refusals == 1, "refused by the producer before sending: parked at once"
    assert ids_of(await read_to_end(kafka_bootstrap, roomy)) == [fits]


@pytest.mark.timeout(600)  # a private stack up (up to 300 s) and down (120 s)
async def test_a_topic_that_does_not_exist_with_auto_create_off_is_parked_after_the_wait(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    """A broker of this test only, with auto.create.topics.enable=false (the shared one
    creates topics on first use): a row for a topic that does not exist is retried for
    park_topic_wait, then parked as unknown_topic; the other keys of its lane are published
    meanwhile, and the topic is not created."""
    stack = PrivateStack(tmp_path, auto_create_topics=False).up()
    try:
        good, missing = "outbox.good", "outbox.missing"
        await create_topics(stack.bootstrap, [good])
        lane = await lane_of_key(pool, "lost-key")
        behind_keys = await keys_in_lane(pool, lane, "behind-", 5)
        [lost] = await write(pool, [OutboxRecord(missing, "lost-key", '{"N": 0}')])
        behind = await write(
            pool,
            [
                *(OutboxRecord(good, k, '{"N": 1}') for k in behind_keys),
                *(OutboxRecord(good, f"other-{i}", '{"N": 2}') for i in range(20)),
            ],
        )
        relay = OutboxRelay(
            dsn=database_url,
            bootstrap=stack.bootstrap,
            metrics=Metrics().outbox,
            config=RelayConfig(publish_timeout=2.0, park_topic_wait=3.0, poll_interval=0.2),
        )
        started = time.monotonic()
        await relay.start()
        try:
            await eventually(
                lambda: unpublished_keys(pool, behind),
                until=lambda keys: keys == [],
                timeout=BEHIND_WITHIN + 40,
                what="the rows behind the missing topic's row published",
            )
            behind_after = time.monotonic() - started
            await eventually(
                lambda: parked_ids(pool),
                until=lambda p: p == {lost: "unknown_topic"},
                timeout=30,
                what="the missing topic's row parked",
            )
            parked_after = time.monotonic() - started
        finally:
            await relay.stop()
        print(
            f"\nauto-create off: keys behind published within {behind_after:.1f}s, "
            f"the row parked within {parked_after:.1f}s (park_topic_wait 3 s)"
        )
        assert behind_after < BEHIND_WITHIN
        assert parked_after >= 3.0, "not parked before the wait"
        admin = AIOKafkaAdminClient(bootstrap_servers=stack.bootstrap)
        await admin.start()
        try:
            assert missing not in await admin.list_topics(), "auto-create is off"
        finally:
            await admin.close()
        assert sorted(ids_of(await read_to_end(stack.bootstrap, good))) == behind
    finally:
        stack.down()
