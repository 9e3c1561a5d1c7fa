"""DLQ replay against real Kafka: records go back whole to their source partition, a dry run
sends nothing, --since filters, a second run sends nothing new, truncated values never go."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from devkit.kafka import consume, create_topics
from streams.dlq.replay import replay_dlq
from streams.dlq.rules import SKIP_NO_KEY_NO_VALUE, SKIP_TRUNCATED, Decision, ReplayUsageError
from streams.settings import Settings

pytestmark = pytest.mark.integration

EVENTS = "pin.calendar.events.v1"
Header = tuple[str, bytes]


def dlq_headers(
    source: str, partition: int, offset: int, reason: str = "value is not valid JSON", **extra: str
) -> list[Header]:
    kind = "schema" if "field" in reason else "json"
    return [
        ("dlq-reason", reason.encode()),
        ("dlq-error-kind", kind.encode()),
        ("dlq-source-topic", source.encode()),
        ("dlq-source-partition", str(partition).encode()),
        ("dlq-source-offset", str(offset).encode()),
        *[(k, v.encode()) for k, v in extra.items()],
    ]


class Topics:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.source = settings.topic(EVENTS)
        self.dlq = self.source + ".dlq"


@pytest.fixture
async def topics(kafka_bootstrap: str, topic_prefix: str) -> Topics:
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix, app_id=f"{topic_prefix}app"
    )
    t = Topics(settings)
    await create_topics(kafka_bootstrap, [t.source, t.dlq])
    return t


async def produce_dlq(
    bootstrap: str,
    topic: str,
    records: list[tuple[bytes | None, bytes | None, list[Header]]],
    timestamp_ms: int | None = None,
) -> None:
    """DLQ records as the worker writes them, from a plain producer (acked before return)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, key=k, value=v, headers=h, timestamp_ms=timestamp_ms)
            for k, v, h in records
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def count(bootstrap: str, topic: str) -> int:
    """Records on ``topic`` now (end offsets; every replay send is acked before it returns)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        parts = [TopicPartition(topic, p) for p in range(4)]
        ends = await consumer.end_offsets(parts)
        return sum(ends.values())
    finally:
        await consumer.stop()


async def test_replay_sends_key_value_to_source_partition_with_only_replayed_from(
    topics: Topics,
) -> None:
    s, src = topics.settings, topics.source
    await produce_dlq(
        s.kafka_bootstrap,
        topics.dlq,
        [
            (b"k1", b"{not json", dlq_headers(src, 2, 40)),
            (b"k2", b'{"EventId": 1}', dlq_headers(src, 1, 7, "EventId: field required")),
            (b"k3", b"", dlq_headers(src, 3, 9, **{"dlq-value-null": "true"})),  # tombstone
            (b"k4", b"x" * 64, dlq_headers(src, 0, 3, **{"dlq-value-truncated": "true"})),
            (None, b"", dlq_headers(src, 0, 4, **{"dlq-value-null": "true"})),
        ],
    )
    seen: list[Decision] = []
    result = await replay_dlq(s, EVENTS, on_decision=seen.append)
    assert result.replayed == 3
    assert result.skipped == {SKIP_TRUNCATED: 1, SKIP_NO_KEY_NO_VALUE: 1}
    assert result.by_reason == {"value is not valid JSON": 4, "EventId: field required": 1}
    assert result.by_source_topic == {src: 5}
    assert await count(s.kafka_bootstrap, src) == 3  # nothing else was sent

    out = {r.key: r for r in await consume(s.kafka_bootstrap, src, count=3)}
    dlq_offsets = {d.key: d for d in seen}
    assert set(out) == {b"k1", b"k2", b"k3"}
    assert (out[b"k1"].value, out[b"k1"].partition) == (b"{not json", 2)
    assert (out[b"k2"].value, out[b"k2"].partition) == (b'{"EventId": 1}', 1)
    assert (out[b"k3"].value, out[b"k3"].partition) == (None, 3)
    for key, rec in out.items():
        d = dlq_offsets[key]
        assert list(rec.headers) == [
            ("dlq-replayed-from", f"{topics.dlq}:{d.dlq_partition}:{d.dlq_offset}".encode())
        ]


async def test_second_run_sends_only_what_was_dead_lettered_since(topics: Topics) -> None:
    s, src = topics.settings, topics.source
    await produce_dlq(
        s.kafka_bootstrap,
        topics.dlq,
        [(f"a{i}".encode(), b"{", dlq_headers(src, i % 4, i)) for i in range(6)],
    )
    assert (await replay_dlq(s, EVENTS)).replayed == 6
    again = await replay_dlq(s, topics.dlq)  # the .dlq name works too
    assert (again.replayed, again.read) == (0, 0)
    assert await count(s.kafka_bootstrap, src) == 6

    await produce_dlq(s.kafka_bootstrap, topics.dlq, [(b"late", b"{", dlq_headers(src, 0, 99))])
    seen: list[Decision] = []
    third = await replay_dlq(s, EVENTS, on_decision=seen.append)
    assert third.replayed == 1 and [d.key for d in seen] == [b"late"]
    assert await count(s.kafka_bootstrap, src) == 7


async def test_dry_run_sends_nothing_and_commits_nothing(topics: Topics) -> None:
    s, src = topics.settings, topics.source
    await produce_dlq(
        s.kafka_bootstrap,
        topics.dlq,
        [
            (b"k1", b"{", dlq_headers(src, 0, 1)),
            (b"k2", b"xx", dlq_headers(src, 1, 2, **{"dlq-value-truncated": "true"})),
        ],
    )
    seen: list[Decision] = []
    dry = await replay_dlq(s, EVENTS, dry_run=True, on_decision=seen.append)
    assert (dry.replayed, dry.skipped[SKIP_TRUNCATED], len(seen)) == (1, 1, 2)
    assert await count(s.kafka_bootstrap, src) == 0
    real = await replay_dlq(s, EVENTS)  # the dry run did not move the group's offsets
    assert real.replayed == 1
    assert await count(s.kafka_bootstrap, src) == 1


async def test_since_starts_at_the_timestamp_and_overrides_progress(topics: Topics) -> None:
    s, src = topics.settings, topics.source
    cut = datetime.now(UTC) - timedelta(hours=1)
    old_ms = int((cut - timedelta(hours=2)).timestamp() * 1000)
    new_ms = int((cut + timedelta(minutes=30)).timestamp() * 1000)
    await produce_dlq(
        s.kafka_bootstrap,
        topics.dlq,
        [(f"old{i}".encode(), b"{", dlq_headers(src, i, i)) for i in range(4)],
        timestamp_ms=old_ms,
    )
    await produce_dlq(
        s.kafka_bootstrap,
        topics.dlq,
        [(f"new{i}".encode(), b"{", dlq_headers(src, i, 10 + i)) for i in range(3)],
        timestamp_ms=new_ms,
    )
    seen: list[Decision] = []
    await replay_dlq(s, EVENTS, since=cut, on_decision=seen.append)
    assert sorted(d.key for d in seen) == [b"new0", b"new1", b"new2"]
    assert await count(s.kafka_bootstrap, src) == 3
    # --since ignores the group's progress: the same window again is sent again ...
    assert (await replay_dlq(s, EVENTS, since=cut)).replayed == 3
    # ... and leaves the progress at the end offsets: a plain run sends nothing old.
    assert (await replay_dlq(s, EVENTS)).read == 0
    future = await replay_dlq(s, EVENTS, since=datetime.now(UTC) + timedelta(days=1))
    assert future.read == 0
    assert await count(s.kafka_bootstrap, src) == 6


async def test_missing_dlq_topic_is_a_usage_error(kafka_bootstrap: str, topic_prefix: str) -> None:
    s = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix + "none.")
    with pytest.raises(ReplayUsageError, match="does not exist"):
        await replay_dlq(s, EVENTS)
