"""After workers are killed and restarted and the gap healer has filled a gap, every input
partition's committed offset reaches its end offset - promptly, not one offset per commit.

Two real workers (devkit/procs/gap_worker.py: the real worker, which here throws away the
first fetch of a range of partition 0, as faust-streaming 0.15 does to records fetched around
a rebalance). Workers are SIGKILLed and started again while records flow until a worker's log
shows ``gap_filled``; then one more kill, and every partition of the calendar input must be
committed up to its end offset within COMMIT_BOUND seconds of everything being applied.
Faust's own commit bookkeeping took one commit per filled record to pass such a gap
(streams/faust_compat/commits.py): 300 s for the 300 records here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from devkit.messages.factories import encode
from devkit.wait import NotWithin, eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings
from tests.e2e.test_input_gaps import GapWorker, applied, events, produce_to

pytestmark = pytest.mark.e2e

EVENTS = "pin.calendar.events.v1"
PARTITIONS = 4
LOST = 300  # offsets of partition 0 thrown away at their first fetch
COMMIT_BOUND = 30.0


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    try:
        yield started
    finally:
        for w in started:
            w.stop()


async def committed_and_end(kafka: str, group: str, topic: str) -> dict[int, tuple[int, int]]:
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka, group_id=None)
    await admin.start()
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps)
        found = await admin.list_consumer_group_offsets(group, partitions=tps)
    finally:
        await consumer.stop()
        await admin.close()
    return {tp.partition: (found[tp].offset if tp in found else -1, ends[tp]) for tp in tps}


async def produce_everywhere(kafka: str, topic: str, kind: str, per_partition: int) -> int:
    for p in range(PARTITIONS):
        await produce_to(kafka, topic, p, [encode(e) for e in events(per_partition, kind)])
    return per_partition * PARTITIONS


def filled(workers: list[WorkerProcess]) -> int:
    return sum(w.log_path.read_text(errors="replace").count("gap_filled") for w in workers)


@pytest.mark.timeout(600)
async def test_commits_reach_the_end_offsets_after_kills_and_a_filled_gap(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, workers: list[Any]
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    topic = topic_prefix + EVENTS
    group = f"{topic_prefix}reminders"
    kind = f"churn-{uuid.uuid4().hex[:6]}"
    first = 40
    env = worker_env(
        database_url,
        kafka_bootstrap,
        topic_prefix,
        GAP_TEST_DROP=f"0:{first}:{first + LOST}",
        BROKER_SESSION_TIMEOUT="10",
        BROKER_HEARTBEAT_INTERVAL="1",
    )
    pair = [GapWorker(env, tmp_path, f"churn-{i}").start() for i in range(2)]
    workers.extend(pair)
    for w in pair:
        await w.wait_ready()
    total = await produce_everywhere(kafka_bootstrap, topic, kind, 10)
    await produce_to(kafka_bootstrap, topic, 0, [encode(e) for e in events(first - 10, kind)])
    total += first - 10

    async def all_applied() -> bool:
        return await applied(database_url, kind) == total

    await eventually(all_applied, timeout=90, what="first records applied", interval=0.2)

    # Kill and restart a worker while the records that will be lost flow, until the healer
    # has filled them.
    await produce_to(kafka_bootstrap, topic, 0, [encode(e) for e in events(LOST + 20, kind)])
    total += LOST + 20
    kills = 0
    while not filled(pair) or kills < 1:
        victim = pair[kills % 2]
        victim.kill()
        victim.start()
        kills += 1
        total += await produce_everywhere(kafka_bootstrap, topic, kind, 5)
        await victim.wait_ready(timeout=120)
        assert kills <= 4, "the gap healer never ran:\n" + "\n".join(w.tail() for w in pair)
    await eventually(all_applied, timeout=120, what="everything applied", interval=0.2)

    # One more kill after the fill: the new owner starts from the group's committed offset.
    pair[kills % 2].kill()
    pair[kills % 2].start()
    await pair[kills % 2].wait_ready(timeout=120)
    total += await produce_everywhere(kafka_bootstrap, topic, kind, 5)
    await eventually(all_applied, timeout=120, what="everything applied", interval=0.2)

    last: dict[int, tuple[int, int]] = {}

    async def caught_up() -> bool:
        nonlocal last
        last = await committed_and_end(kafka_bootstrap, group, topic)
        return all(c == end for c, end in last.values())

    try:
        await eventually(caught_up, timeout=COMMIT_BOUND, what="commits at the end", interval=0.5)
    except NotWithin:
        raise AssertionError(
            f"committed/end per partition {last} {COMMIT_BOUND} s after everything was "
            f"applied ({filled(pair)} gap fills, {kills + 1} kills)"
        ) from None
    assert filled(pair) >= 1
