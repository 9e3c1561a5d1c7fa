"""Re-publish a dead-letter topic to its source topic, bounded and resumable.

The command reads ``<topic>.dlq`` up to the end offsets it saw when it started (it never
runs forever), sends each record back to the topic it came from with its original key and
value, waits for every ack (idempotent producer, acks=all) and only then commits its
progress under the consumer group ``<APP_ID>.dlq-replay``, so running it again sends only
what was dead-lettered since. ``--since`` starts at a timestamp instead of the saved
progress (and saves the end offsets as progress too). A record whose value was truncated
on its way to the DLQ is skipped and reported: a truncated value is never sent. So is
one written without its contract's secret fields (``dlq-redacted``, e.g. PayloadCipher):
it is not what the producer sent, and the producer re-sends the original. Values are
never printed or logged.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition

from streams.dlq.rules import (
    SKIP_NOT_SELECTED,
    SKIP_UNKNOWN_TOPIC,
    Decision,
    ReplayUsageError,
    decide,
    resolve_topic,
)
from streams.kafka_client import client_options
from streams.settings import Settings


@dataclass
class ReplayResult:
    dlq_topic: str
    source_topic: str
    dry_run: bool
    since: datetime | None
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition: [start, end)
    replayed: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    by_reason: Counter[str] = field(default_factory=Counter)
    by_source_topic: Counter[str] = field(default_factory=Counter)
    redacted_fields: set[str] = field(default_factory=set)

    @property
    def read(self) -> int:
        return self.replayed + sum(self.skipped.values())


async def replay_dlq(
    settings: Settings,
    topic: str,
    *,
    since: datetime | None = None,
    dry_run: bool = False,
    idle_timeout_s: float = 30.0,
    on_decision: Callable[[Decision], None] | None = None,
    reason: str | None = None,
    record: tuple[int, int] | None = None,
) -> ReplayResult:
    """Replay ``topic``'s DLQ up to its end offsets as of now; ``on_decision`` sees every
    record read (the result keeps counts only, so a large DLQ does not fill memory).

    Raises ReplayUsageError for an unknown topic, KafkaError (or TimeoutError) when Kafka
    fails midway: what was acked by then is committed, so a re-run resumes after it.

    A selective replay sends only the records with ``reason``, or the one ``record``
    (partition, offset), read from the beginning (or ``since``; a record: just its offset);
    the others are skipped as ``not-selected``, and no progress is committed (the next plain
    replay still sends what this one passed over)."""
    selective = reason is not None or record is not None
    source, dlq = resolve_topic(settings, topic)
    result = ReplayResult(dlq, source, dry_run, since)
    existing, partitions = await _topic_layout(settings, dlq)
    consumer = AIOKafkaConsumer(
        **client_options(settings),
        group_id=f"{settings.app_id}.dlq-replay",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    producer: AIOKafkaProducer | None = None
    try:
        await consumer.start()
        tps = [TopicPartition(dlq, p) for p in partitions]
        consumer.assign(tps)
        end = await consumer.end_offsets(tps)
        begin = await consumer.beginning_offsets(tps)
        start: dict[TopicPartition, int] = {}
        committed: dict[TopicPartition, int] = {}
        for tp in tps:
            offset = await consumer.committed(tp)
            committed[tp] = offset if offset is not None else 0
        if since is not None:
            found = await consumer.offsets_for_times(
                {tp: int(since.timestamp() * 1000) for tp in tps}
            )
            for tp in tps:
                hit = found.get(tp)
                start[tp] = hit.offset if hit is not None else end[tp]
        elif selective:
            start = dict(begin)
        else:
            for tp in tps:
                start[tp] = max(committed[tp], begin[tp])
        if record is not None:
            part, offset = record
            if part not in partitions:
                raise ReplayUsageError(f"{dlq} has no partition {part}")
            for tp in tps:
                inside = tp.partition == part and begin[tp] <= offset < end[tp]
                start[tp], end[tp] = (offset, offset + 1) if inside else (end[tp], end[tp])
            if not any(start[tp] < end[tp] for tp in tps):
                raise ReplayUsageError(f"{dlq} has no record at partition {part} offset {offset}")
        pending = set()
        for tp in tps:
            result.ranges[tp.partition] = (start[tp], end[tp])
            if start[tp] < end[tp]:
                consumer.seek(tp, start[tp])
                pending.add(tp)
        if pending and not dry_run:
            producer = AIOKafkaProducer(
                **client_options(settings),
                acks="all",
                enable_idempotence=True,
            )
            await producer.start()
        partition_counts: dict[str, int] = {}
        last_progress = time.monotonic()
        while pending:
            batch = await consumer.getmany(*pending, timeout_ms=500, max_records=500)
            sends = []
            commits: dict[TopicPartition, int] = {}
            for tp, records in batch.items():
                for rec in records:
                    if rec.offset >= end[tp]:
                        break  # dead-lettered after we started: the next run's
                    d = decide(
                        dlq,
                        tp.partition,
                        rec.offset,
                        rec.key,
                        rec.value,
                        list(rec.headers),
                        source,
                    )
                    if d.skip is None and d.target_topic not in existing:
                        d = replace(d, skip=SKIP_UNKNOWN_TOPIC)
                    if reason is not None and d.reason != reason:
                        d = replace(d, skip=SKIP_NOT_SELECTED)
                    result.by_reason[d.reason] += 1
                    result.by_source_topic[d.target_topic] += 1
                    result.redacted_fields.update(d.redacted)
                    if d.skip is not None:
                        result.skipped[d.skip] += 1
                    else:
                        result.replayed += 1
                    if on_decision is not None:
                        on_decision(d)
                    commits[tp] = rec.offset + 1
                    if d.skip is None and producer is not None:
                        sends.append(await _send(producer, d, partition_counts))
            if sends:
                await asyncio.gather(*sends)  # every ack before the commit
            # Progress only moves forward: a --since run that starts earlier does not
            # make the next plain run send again what an earlier run already sent.
            ahead = {tp: o for tp, o in commits.items() if o > committed[tp]}
            if ahead and not dry_run and not selective:
                await consumer.commit(ahead)
                committed.update(ahead)
            if batch:
                last_progress = time.monotonic()
            for tp in list(pending):
                if await consumer.position(tp) >= end[tp]:
                    pending.discard(tp)
            if pending and time.monotonic() - last_progress > idle_timeout_s:
                raise TimeoutError(
                    f"no record from {dlq} for {idle_timeout_s:g}s before its end offsets"
                )
        # Done up to the end offsets taken at the start, on every partition: after a --since
        # run too, so the next plain run sends only what is dead-lettered from now on.
        final = {tp: end[tp] for tp in tps if end[tp] > committed[tp]}
        if final and not dry_run and not selective:
            await consumer.commit(final)
        return result
    finally:
        if producer is not None:
            await producer.stop()
        await consumer.stop()


async def _topic_layout(settings: Settings, dlq: str) -> tuple[set[str], list[int]]:
    """The topics that exist, and the partitions of ``dlq`` (ReplayUsageError if it is missing)."""
    admin = AIOKafkaAdminClient(**client_options(settings))
    try:
        await admin.start()
        return await topic_layout(admin, settings, dlq)
    finally:
        await admin.close()


async def topic_layout(
    admin: AIOKafkaAdminClient, settings: Settings, dlq: str
) -> tuple[set[str], list[int]]:
    """``_topic_layout`` on a started admin client."""
    existing = set(await admin.list_topics())
    if dlq not in existing:
        raise ReplayUsageError(
            f"topic {dlq} does not exist on {settings.kafka_bootstrap} (check TOPIC_PREFIX; "
            "`python -m streams topics` creates it)"
        )
    [described] = await admin.describe_topics([dlq])
    return existing, sorted(int(p["partition"]) for p in described["partitions"])


async def _send(
    producer: AIOKafkaProducer, d: Decision, partition_counts: dict[str, int]
) -> asyncio.Future[object]:
    """Send one record; to its source partition when that partition exists (so per-key order
    holds even for producers with their own partitioner), else by key as usual."""
    if d.target_topic not in partition_counts:
        partition_counts[d.target_topic] = len(await producer.partitions_for(d.target_topic))
    partition = d.target_partition
    if partition is not None and partition >= partition_counts[d.target_topic]:
        partition = None
    fut: asyncio.Future[object] = await producer.send(
        d.target_topic,
        key=d.key,
        value=d.value,
        headers=list(d.headers),
        partition=partition,
    )
    return fut
