"""``dlq replay``: re-publish a dead-letter topic to its source topic, bounded and resumable.

The command reads ``<topic>.dlq`` up to the end offsets it saw when it started (it never
runs forever), sends each record back to the topic it came from with its original key and
value, waits for every ack (idempotent producer, acks=all) and only then commits its
progress under the consumer group ``<APP_ID>.dlq-replay``, so running it again sends only
what was dead-lettered since. ``--since`` starts at a timestamp instead of the saved
progress (and saves the end offsets as progress too). A record whose value was truncated
on its way to the DLQ is skipped and reported: a truncated value is never sent. Values
are never printed or logged.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from streams.contracts import ALL_TOPICS, DLQ_SUFFIX
from streams.settings import Settings

Header = tuple[str, bytes]

DLQ_HEADER_PREFIX = "dlq-"
H_REASON = "dlq-reason"
H_KIND = "dlq-error-kind"
H_SOURCE_TOPIC = "dlq-source-topic"
H_SOURCE_PARTITION = "dlq-source-partition"
H_VALUE_TRUNCATED = "dlq-value-truncated"
# The original record had neither key nor value; the DLQ copy carries an empty value.
H_VALUE_NULL = "dlq-value-null"
H_REPLAYED_FROM = "dlq-replayed-from"

SKIP_TRUNCATED = "truncated"
SKIP_NO_KEY_NO_VALUE = "no-key-no-value"
SKIP_UNKNOWN_TOPIC = "source-topic-missing"


class ReplayUsageError(Exception):
    """The command was asked for something that cannot be: unknown topic, bad --since."""


def input_topic_names() -> list[str]:
    return [c.name for c in ALL_TOPICS if c.direction == "in"]


def resolve_topic(settings: Settings, name: str) -> tuple[str, str]:
    """(source topic, DLQ topic) as Kafka names them, from a contract name, its ``.dlq``
    name, or either with TOPIC_PREFIX already in front."""
    base = name.strip()
    if base.endswith(DLQ_SUFFIX):
        base = base[: -len(DLQ_SUFFIX)]
    known = input_topic_names()
    if base not in known and settings.topic_prefix and base.startswith(settings.topic_prefix):
        base = base[len(settings.topic_prefix) :]
    if base not in known:
        raise ReplayUsageError(
            f"unknown topic {name!r}: DLQs exist for the input topics {', '.join(known)}"
        )
    source = settings.topic(base)
    return source, source + DLQ_SUFFIX


def parse_since(text: str) -> datetime:
    """An ISO-8601 instant with its offset, e.g. 2026-05-01T12:00:00Z."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ReplayUsageError(
            f"--since {text!r} is not an ISO-8601 date-time (e.g. 2026-05-01T12:00:00Z)"
        ) from None
    if when.tzinfo is None:
        raise ReplayUsageError(f"--since {text!r} has no UTC offset; add one (e.g. Z or +02:00)")
    return when


def _header(headers: Sequence[Header], name: str) -> bytes | None:
    for k, v in headers:
        if k == name:
            return v
    return None


def _text(raw: bytes | None, default: str = "") -> str:
    return raw.decode("utf-8", "replace") if raw is not None else default


@dataclass(frozen=True)
class Decision:
    """What to do with one DLQ record. ``skip`` is None for a record to replay."""

    dlq_partition: int
    dlq_offset: int
    kind: str
    reason: str
    target_topic: str
    skip: str | None
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[Header, ...] = ()
    target_partition: int | None = None


def decide(
    dlq_topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
    default_topic: str,
) -> Decision:
    """Turn one DLQ record back into the record it was (pure; no I/O)."""
    kind = _text(_header(headers, H_KIND), "unknown")
    reason = _text(_header(headers, H_REASON), "unknown")
    target = _text(_header(headers, H_SOURCE_TOPIC)) or default_topic
    base = Decision(partition, offset, kind, reason, target, None)
    if _text(_header(headers, H_VALUE_TRUNCATED)).lower() == "true":
        return replace(base, skip=SKIP_TRUNCATED)
    if _text(_header(headers, H_VALUE_NULL)).lower() == "true":
        value = None
    if key is None and value is None:
        # Kafka cannot carry a record with neither; what it was is in the DLQ, nothing to send.
        return replace(base, skip=SKIP_NO_KEY_NO_VALUE)
    source_partition = _text(_header(headers, H_SOURCE_PARTITION))
    kept = tuple((k, v) for k, v in headers if not k.startswith(DLQ_HEADER_PREFIX))
    return replace(
        base,
        key=key,
        value=value,
        headers=(*kept, (H_REPLAYED_FROM, f"{dlq_topic}:{partition}:{offset}".encode())),
        target_partition=int(source_partition) if source_partition.isdigit() else None,
    )


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
) -> ReplayResult:
    """Replay ``topic``'s DLQ up to its end offsets as of now; ``on_decision`` sees every
    record read (the result keeps counts only, so a large DLQ does not fill memory).

    Raises ReplayUsageError for an unknown topic, KafkaError (or TimeoutError) when Kafka
    fails midway: what was acked by then is committed, so a re-run resumes after it."""
    source, dlq = resolve_topic(settings, topic)
    result = ReplayResult(dlq, source, dry_run, since)
    existing, partitions = await _topic_layout(settings.kafka_bootstrap, dlq)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
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
        else:
            for tp in tps:
                start[tp] = max(committed[tp], begin[tp])
        pending = set()
        for tp in tps:
            result.ranges[tp.partition] = (start[tp], end[tp])
            if start[tp] < end[tp]:
                consumer.seek(tp, start[tp])
                pending.add(tp)
        if pending and not dry_run:
            producer = AIOKafkaProducer(
                bootstrap_servers=settings.kafka_bootstrap,
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
                    result.by_reason[d.reason] += 1
                    result.by_source_topic[d.target_topic] += 1
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
            if ahead and not dry_run:
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
        if final and not dry_run:
            await consumer.commit(final)
        return result
    finally:
        if producer is not None:
            await producer.stop()
        await consumer.stop()


async def _topic_layout(bootstrap: str, dlq: str) -> tuple[set[str], list[int]]:
    """The topics that exist, and the partitions of ``dlq`` (ReplayUsageError if it is missing)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        if dlq not in existing:
            raise ReplayUsageError(
                f"topic {dlq} does not exist on {bootstrap} (check TOPIC_PREFIX; `python -m streams topics` creates it)"
            )
        [described] = await admin.describe_topics([dlq])
        return existing, sorted(int(p["partition"]) for p in described["partitions"])
    finally:
        await admin.close()


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


def _short(reason: str, width: int = 120) -> str:
    return reason if len(reason) <= width else reason[: width - 1] + "…"


def describe(d: Decision) -> str:
    action = "replay" if d.skip is None else f"skip:{d.skip}"
    return (
        f"  partition={d.dlq_partition} offset={d.dlq_offset} kind={d.kind} action={action}"
        f" target={d.target_topic} reason={_short(d.reason)!r}"
    )


def summary(result: ReplayResult) -> str:
    verb = "would replay" if result.dry_run else "replayed"
    skipped = result.skipped
    lines = [
        f"{verb} {result.replayed}, skipped truncated {skipped[SKIP_TRUNCATED]}"
        + "".join(
            f", skipped {name} {n}" for name, n in sorted(skipped.items()) if name != SKIP_TRUNCATED
        )
        + f" (read {result.read} from {result.dlq_topic})"
    ]
    if result.dry_run:
        lines.append("dry run: nothing sent, no progress committed")
    if result.by_reason:
        lines.append("by reason:")
        lines += [f"  {n:6d}  {_short(r)}" for r, n in result.by_reason.most_common()]
    if result.by_source_topic:
        lines.append("by source topic:")
        lines += [f"  {n:6d}  {t}" for t, n in result.by_source_topic.most_common()]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m streams dlq",
        description="Dead-letter topics: replay what was dead-lettered into its source topic.",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    replay = sub.add_parser(
        "replay",
        help="re-publish <topic>.dlq to its source topic, up to its end offsets as of now",
    )
    replay.add_argument("topic", help="input topic as in the contract, e.g. pin.calendar.events.v1")
    replay.add_argument(
        "--since",
        help="start at the first record at or after this instant (ISO-8601 with offset); "
        "without it, resume after the last replay (group <APP_ID>.dlq-replay)",
    )
    replay.add_argument(
        "--dry-run", action="store_true", help="print what would be replayed, send nothing"
    )
    return parser


def run_cli(settings: Settings, argv: Sequence[str]) -> int:
    """``python -m streams dlq replay TOPIC [--since ISO-8601] [--dry-run]``; returns the exit code."""
    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as exc:  # argparse already printed the usage and the problem
        return int(exc.code) if isinstance(exc.code, int) else 2
    try:
        since = parse_since(args.since) if args.since is not None else None
        source, dlq = resolve_topic(settings, args.topic)
    except ReplayUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    mode = "dry run" if args.dry_run else "replay"
    start_from = f"since {since.isoformat()}" if since else "after the last replay"
    print(f"dlq {mode}: {dlq} -> {source} ({start_from})")

    def show(d: Decision) -> None:
        if args.dry_run or d.skip is not None:
            print(describe(d))

    try:
        result = asyncio.run(
            replay_dlq(settings, args.topic, since=since, dry_run=args.dry_run, on_decision=show)
        )
    except ReplayUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KafkaError, TimeoutError, OSError) as exc:
        detail = str(exc) if isinstance(exc, KafkaError) else f"{type(exc).__name__}: {exc}"
        print(
            f"error: Kafka at {settings.kafka_bootstrap} (setting KAFKA_BOOTSTRAP): {detail};"
            " what was acked is committed, running the command again resumes after it",
            file=sys.stderr,
        )
        return 1
    print(summary(result))
    return 0
