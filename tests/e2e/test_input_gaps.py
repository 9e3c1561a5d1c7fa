"""Offsets that never reach the stream, on a real worker and real Kafka.

Two kinds of skipped offsets reach the gap guard: records Faust fetched and then lost
(faust-streaming 0.15 after a rebalance; re-created here by ``devkit/procs/gap_worker.py``)
and offsets that hold no record at all (transaction markers, compaction). The first must be
read again and never be committed past before they are processed; the second must cost
next to nothing.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from devkit.messages.factories import calendar_event, encode
from devkit.wait import NotWithin, eventually
from devkit.workers import ROOT, WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

EVENTS = "pin.calendar.events.v1"


class GapWorker(WorkerProcess):
    """The real worker with the test hooks of devkit/procs/gap_worker.py."""

    def start(self) -> GapWorker:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "devkit.procs.gap_worker"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # kill() signals its process group
        )
        log.close()
        return self

    def count(self, needle: str) -> int:
        return self.log_path.read_text(errors="replace").count(needle)


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    try:
        yield started
    finally:
        for w in started:
            w.stop()


async def until(
    check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60.0, worker: Any = None
) -> None:
    try:
        await eventually(check, timeout=timeout, what=what, interval=0.1)
    except NotWithin as exc:
        tail = worker.tail(60) if worker is not None else ""
        raise NotWithin(f"{exc}\n{tail}") from None


async def applied(db: str, kind: str) -> int:
    conn = await asyncpg.connect(db)
    try:
        return int(
            await conn.fetchval("SELECT count(*) FROM calendar.events WHERE kind = $1", kind)
        )
    finally:
        await conn.close()


async def stored(db: str, event_ids: list[uuid.UUID]) -> int:
    conn = await asyncpg.connect(db)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM calendar.events WHERE event_id = ANY($1)", event_ids
            )
        )
    finally:
        await conn.close()


async def committed(kafka: str, group: str, tp: TopicPartition) -> int | None:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group, partitions=[tp])
    finally:
        await admin.close()
    meta = offsets.get(tp)
    return None if meta is None or meta.offset < 0 else int(meta.offset)


async def produce_to(kafka: str, topic: str, partition: int, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        futures = [await producer.send(topic, v, partition=partition) for v in values]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def metric(body: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}{{[^}}]*}} (\S+)$", body, re.M))


def events(n: int, kind: str) -> list[dict[str, Any]]:
    return [{**calendar_event(ReminderOffsetsMinutes=[]), "Kind": kind} for _ in range(n)]


@pytest.mark.timeout(480)  # its waits add up to 420 s (start 90, six polls of 30-60 s)
async def test_commits_never_pass_lost_records_before_their_re_read_is_processed(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, workers: list[Any]
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    topic = topic_prefix + EVENTS
    tp = TopicPartition(topic, 0)
    group = f"{topic_prefix}reminders"
    first, lost, rest = 40, 25, 60  # offsets 40..64 are fetched and thrown away once
    hole = first
    env = worker_env(
        database_url,
        kafka_bootstrap,
        topic_prefix,
        GAP_TEST_DROP=f"0:{hole}:{hole + lost}",
        GAP_TEST_HOLD=f"0:{hole}",
    )
    worker = GapWorker(env, tmp_path, "gap-worker").start()
    workers.append(worker)
    await worker.wait_ready()
    kind = f"gap-{uuid.uuid4().hex[:6]}"
    batch = [encode(e) for e in events(first + lost + rest, kind)]

    await produce_to(kafka_bootstrap, topic, 0, batch[:first])
    await until(lambda: _eq(applied(database_url, kind), first), "first records applied")
    await until(
        lambda: _eq(committed(kafka_bootstrap, group, tp), hole), "commit up to the hole", 30
    )

    # The lost records and the one that reveals the jump: one batch, held in the applier.
    await produce_to(kafka_bootstrap, topic, 0, batch[first : first + lost + 1])
    await until(lambda: _true(worker.count("GAPTEST hold") > 0), "re-read reached", 60, worker)
    # The rest comes as a later batch, applied while the held one waits (two batches in
    # flight): Faust has gap marks over the lost offsets, and the later batch is done. It must
    # not be acked before the held batch: an ack beyond the gap marks would let Faust commit
    # past the lost records (CI saw 66). Let Faust's commit timer fire a few times, then read
    # the committed offset from Kafka.
    await produce_to(kafka_bootstrap, topic, 0, batch[first + lost + 1 :])
    await until(lambda: _gt(applied(database_url, kind), first), "later batch applied", 60, worker)
    commits = worker.count("GAPTEST commit")
    await until(lambda: _true(worker.count("GAPTEST commit") >= commits + 3), "3 commits", 30)
    assert await committed(kafka_bootstrap, group, tp) == hole
    # The lost records are applied by their re-read only, which is held. (Records after
    # them may be: the calendar agent applies two batches at once, Version-guarded.)
    lost_ids = [uuid.UUID(json.loads(b)["EventId"]) for b in batch[first : first + lost]]
    assert await stored(database_url, lost_ids) == 0

    assert worker.proc is not None
    worker.proc.send_signal(signal.SIGUSR2)
    total = first + lost + rest
    await until(lambda: _eq(applied(database_url, kind), total), "all applied", 60, worker)
    await until(lambda: _eq(committed(kafka_bootstrap, group, tp), total), "commit to the end")
    status, body = worker.get("/metrics")
    assert status == 200
    assert metric(body, "reminders_stream_input_gaps_total") == 1
    assert worker.count("GAPTEST dropped") == lost


@pytest.mark.timeout(480)  # its waits add up to 420 s (two starts of 90, four polls of 60)
async def test_records_lost_before_the_first_one_an_assignment_delivers_are_read(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, workers: list[Any]
) -> None:
    # The jump is between the committed offset and the first record the new owner of the
    # partition sees - the stream itself never saw the offset before the jump.
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    topic = topic_prefix + EVENTS
    tp = TopicPartition(topic, 0)
    group = f"{topic_prefix}reminders"
    first, lost, rest = 30, 20, 30
    kind = f"start-{uuid.uuid4().hex[:6]}"
    batch = [encode(e) for e in events(first + lost + rest, kind)]
    env = worker_env(database_url, kafka_bootstrap, topic_prefix)
    before = WorkerProcess(env, tmp_path, "owner-1").start()
    workers.append(before)
    await before.wait_ready()
    await produce_to(kafka_bootstrap, topic, 0, batch[:first])
    await until(lambda: _eq(applied(database_url, kind), first), "first records applied")
    await until(lambda: _eq(committed(kafka_bootstrap, group, tp), first), "committed")
    assert before.stop() == 0

    after = GapWorker(
        {**env, "GAP_TEST_DROP": f"0:{first}:{first + lost}"}, tmp_path, "owner-2"
    ).start()
    workers.append(after)
    await after.wait_ready()
    # Produced once the new owner is past its start-up seeks: nothing re-reads them for it.
    await produce_to(kafka_bootstrap, topic, 0, batch[first:])
    total = first + lost + rest
    await until(lambda: _eq(applied(database_url, kind), total), "all applied", 60, after)
    await until(lambda: _eq(committed(kafka_bootstrap, group, tp), total), "commit to the end")
    assert after.count("GAPTEST dropped") == lost
    status, body = after.get("/metrics")
    assert status == 200 and metric(body, "reminders_stream_input_gaps_total") == 1


@pytest.mark.timeout(300)  # start 90 + all applied 120
async def test_transaction_markers_cost_at_most_one_read_each(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, workers: list[Any]
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    topic = topic_prefix + EVENTS
    worker = WorkerProcess(
        worker_env(database_url, kafka_bootstrap, topic_prefix), tmp_path, "tx-worker"
    ).start()
    workers.append(worker)
    await worker.wait_ready()
    kind = f"tx-{uuid.uuid4().hex[:6]}"
    transactions, per_transaction = 20, 8
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=f"{topic_prefix}tx", acks="all"
    )
    await producer.start()
    try:
        for _ in range(transactions):
            async with producer.transaction():
                for e in events(per_transaction, kind):
                    # One partition, so every commit marker is a hole between two records.
                    await producer.send(topic, encode(e), partition=0)
    finally:
        await producer.stop()
    total = transactions * per_transaction
    await until(lambda: _eq(applied(database_url, kind), total), "all applied", 120, worker)
    # transactions - 1 markers sit between records; the last one has no record after it.
    holes = transactions - 1
    status, body = worker.get("/metrics")
    assert status == 200
    # Before this guard read the broker, each marker cost 50 seeks (about 12-50 s) and the
    # records dropped while seeking were lost when the hole was finally accepted.
    reads = metric(body, "reminders_stream_input_gap_reads_total")
    assert 1 <= reads <= holes
    assert metric(body, "reminders_stream_input_offset_holes_total") == holes
    # Markers are not lost records: nothing was re-read.
    assert metric(body, "reminders_stream_input_gaps_total") == 0


async def _eq(value: Awaitable[Any], expected: Any) -> bool:
    return await value == expected


async def _gt(value: Awaitable[Any], than: Any) -> bool:
    return await value > than


async def _true(value: bool) -> bool:
    return value
