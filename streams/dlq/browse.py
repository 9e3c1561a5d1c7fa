"""Browsing a dead-letter topic, bounded: the newest records of each partition (read back
from its end offsets, at most ``window`` each: a huge DLQ is never loaded whole), with
their reason and kind, newest first, filtered by reason, and the counts by reason of what
was read. Values are never shown: a record shows what ``dlq replay --dry-run`` shows
(partition, offset, kind, reason, whether and why it would be skipped, the fields it was
written without)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from streams.dlq.replay import _topic_layout
from streams.dlq.rules import decide, resolve_topic
from streams.kafka_client import client_options
from streams.settings import Settings

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
# Records read back from each partition's end at most (the counts cover these).
WINDOW = 1000


@dataclass(frozen=True)
class Entry:
    partition: int
    offset: int
    at: str | None
    kind: str
    reason: str
    target_topic: str
    replay: str  # "yes", or why a replay skips it (truncated, redacted, ...)
    redacted: tuple[str, ...] = ()

    def view(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "offset": self.offset,
            "at": self.at,
            "kind": self.kind,
            "reason": self.reason,
            "target_topic": self.target_topic,
            "replay": self.replay,
            "redacted": list(self.redacted),
        }


@dataclass
class Browse:
    dlq_topic: str
    source_topic: str
    records: int = 0  # in the topic (end - beginning offsets, all partitions)
    read: int = 0  # in the window read back
    by_reason: Counter[str] = field(default_factory=Counter)
    by_kind: Counter[str] = field(default_factory=Counter)
    entries: list[Entry] = field(default_factory=list)

    def view(self) -> dict[str, Any]:
        return {
            "dlq_topic": self.dlq_topic,
            "source_topic": self.source_topic,
            "records": self.records,
            "read": self.read,
            "by_reason": dict(self.by_reason.most_common()),
            "by_kind": dict(self.by_kind.most_common()),
            "entries": [e.view() for e in self.entries],
        }


def clamp_limit(limit: int | None) -> int:
    return DEFAULT_LIMIT if limit is None else max(1, min(int(limit), MAX_LIMIT))


async def browse(
    settings: Settings,
    topic: str,
    *,
    reason: str | None = None,
    limit: int | None = None,
    window: int = WINDOW,
) -> Browse:
    """The newest records of ``topic``'s DLQ (ReplayUsageError for an unknown topic), with
    clients of its own (the CLI); the console reuses one pair (streams/dlq/browser.py)."""
    _, dlq = resolve_topic(settings, topic)
    _, partitions = await _topic_layout(settings, dlq)
    consumer = AIOKafkaConsumer(
        **client_options(settings), enable_auto_commit=False, isolation_level="read_committed"
    )
    try:
        await consumer.start()
        return await read_back(settings, consumer, topic, partitions, reason, limit, window)
    finally:
        await consumer.stop()


async def read_back(
    settings: Settings,
    consumer: AIOKafkaConsumer,
    topic: str,
    partitions: list[int],
    reason: str | None,
    limit: int | None,
    window: int = WINDOW,
) -> Browse:
    """``browse`` on a started consumer (its assignment is replaced) and the DLQ's partitions."""
    source, dlq = resolve_topic(settings, topic)
    out = Browse(dlq, source)
    want = clamp_limit(limit)
    found: list[Entry] = []
    tps = [TopicPartition(dlq, p) for p in partitions]
    consumer.assign(tps)
    end = await consumer.end_offsets(tps)
    begin = await consumer.beginning_offsets(tps)
    pending = set()
    for tp in tps:
        out.records += end[tp] - begin[tp]
        start = max(begin[tp], end[tp] - window)
        if start < end[tp]:
            consumer.seek(tp, start)
            pending.add(tp)
    while pending:
        batch = await consumer.getmany(*pending, timeout_ms=1000, max_records=500)
        if not batch:
            break  # nothing more within the timeout (transaction markers at the end)
        for tp, records in batch.items():
            for rec in records:
                if rec.offset >= end[tp]:
                    break
                d = decide(
                    dlq, tp.partition, rec.offset, rec.key, rec.value, list(rec.headers), source
                )
                out.read += 1
                out.by_reason[d.reason] += 1
                out.by_kind[d.kind] += 1
                if reason is not None and d.reason != reason:
                    continue
                at = (
                    datetime.fromtimestamp(rec.timestamp / 1000, UTC).isoformat()
                    if rec.timestamp is not None and rec.timestamp >= 0
                    else None
                )
                found.append(
                    Entry(
                        tp.partition,
                        rec.offset,
                        at,
                        d.kind,
                        d.reason,
                        d.target_topic,
                        d.skip or "yes",
                        d.redacted,
                    )
                )
        for tp in list(pending):
            if await consumer.position(tp) >= end[tp]:
                pending.discard(tp)
    found.sort(key=lambda e: (e.at or "", e.offset), reverse=True)
    out.entries = found[:want]
    return out
