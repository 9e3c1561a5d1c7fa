"""Auditor of pin.calendar.reminder-due.v1: reads the topic (and only the topic) to its end
offsets and compares what is there with the reminders that must be there.

Counts, per SPEC §4: a reminder is *lost* when expected and absent; a *duplicated effect*
is a second outbox record (a different ``outbox-id``) for the same reminder identity or a
second ReminderId for it; a *re-publish* is the same outbox record on the topic again
(same ``outbox-id``), which at-least-once delivery allows; *unexpected* reminders are ones
for cancelled events, superseded (rescheduled) due times or events never produced.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from tests.support.calendar_load import Identity, parse_time

DUE_TOPIC = "pin.calendar.reminder-due.v1"


async def read_to_end(
    bootstrap: str, topic: str, timeout: float = 120.0
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of ``topic`` from the beginning up to the end offsets taken at the start."""
    # No group: the consumer is assigned every partition of the topic by itself.
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        tps = await assigned(consumer, topic)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        out: list[ConsumerRecord[bytes, bytes]] = []
        remaining = {tp for tp in tps if end[tp] > 0}
        deadline = time.monotonic() + timeout
        while remaining:
            assert time.monotonic() < deadline, f"could not read {topic} to its end in {timeout}s"
            batch = await consumer.getmany(*remaining, timeout_ms=500)
            for tp, records in batch.items():
                out.extend(r for r in records if r.offset < end[tp])
            for tp in list(remaining):
                if await consumer.position(tp) >= end[tp]:
                    remaining.discard(tp)
        return out
    finally:
        await consumer.stop()


async def assigned(
    consumer: AIOKafkaConsumer, topic: str, timeout: float = 30.0
) -> list[TopicPartition]:
    """The partitions a group-less consumer of ``topic`` got (metadata may take a moment)."""
    deadline = time.monotonic() + timeout
    while not consumer.assignment():
        assert time.monotonic() < deadline, f"topic {topic} has no partitions (does it exist?)"
        await asyncio.sleep(0.1)
    return sorted(consumer.assignment())


@dataclass(frozen=True)
class Published:
    reminder_id: str
    identity: Identity
    outbox_id: str | None
    timestamp: datetime
    partition: int
    offset: int


def decode(record: ConsumerRecord[bytes, bytes]) -> Published:
    body = json.loads(record.value or b"null")
    start = parse_time(body["StartAt"])
    offset_minutes = int(body["OffsetMinutes"])
    headers = {k: v.decode() for k, v in record.headers or ()}
    ts = datetime.fromtimestamp(record.timestamp / 1000, tz=start.tzinfo)
    return Published(
        reminder_id=body["ReminderId"],
        identity=Identity(
            body["EventId"], offset_minutes, start - timedelta(minutes=offset_minutes)
        ),
        outbox_id=headers.get("outbox-id"),
        timestamp=ts,
        partition=record.partition,
        offset=record.offset,
    )


@dataclass
class AuditReport:
    records: int = 0
    expected: int = 0
    published: int = 0
    """Expected reminders found on the topic."""
    lost: list[Identity] = field(default_factory=list)
    duplicated_effects: int = 0
    duplicated: list[str] = field(default_factory=list)
    republishes: int = 0
    unexpected: Counter[str] = field(default_factory=Counter)
    unexpected_items: list[str] = field(default_factory=list)
    lateness: list[float] = field(default_factory=list)
    """Seconds from DueAt to the first record of each expected reminder."""
    out_of_order_keys: int = 0

    @property
    def max_lateness(self) -> float:
        return max(self.lateness, default=0.0)

    def percentile(self, q: float) -> float:
        if not self.lateness:
            return 0.0
        ordered = sorted(self.lateness)
        return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def audit(
    records: Sequence[ConsumerRecord[bytes, bytes]],
    expected: Mapping[Identity, object],
    forbidden: Mapping[Identity, str],
) -> AuditReport:
    report = AuditReport(records=len(records), expected=len(expected))
    seen = [decode(r) for r in records]
    by_identity: dict[Identity, list[Published]] = defaultdict(list)
    for p in seen:
        by_identity[p.identity].append(p)
    for ident, pubs in by_identity.items():
        outbox_ids = {p.outbox_id for p in pubs}
        reminder_ids = {p.reminder_id for p in pubs}
        extra = max(len(outbox_ids), len(reminder_ids)) - 1
        if extra or None in outbox_ids:
            report.duplicated_effects += max(extra, 1 if None in outbox_ids else 0)
            report.duplicated.append(
                f"{ident.event_id} offset={ident.offset_minutes} due={ident.due_at.isoformat()} "
                f"reminder_ids={sorted(reminder_ids)} outbox_ids={sorted(map(str, outbox_ids))}"
            )
        report.republishes += len(pubs) - len(outbox_ids)
        first = min(pubs, key=lambda p: p.timestamp)
        if ident in expected:
            report.published += 1
            report.lateness.append((first.timestamp - ident.due_at).total_seconds())
        else:
            reason = forbidden.get(ident, "unknown")
            report.unexpected[reason] += 1
            report.unexpected_items.append(
                f"{reason}: {ident.event_id} offset={ident.offset_minutes} "
                f"due={ident.due_at.isoformat()} first_on_topic={first.timestamp.isoformat()} "
                f"outbox_id={first.outbox_id}"
            )
    report.lost = sorted(i for i in expected if i not in by_identity)
    # Per key (EventId), first appearances must follow outbox-id order within a partition.
    first_seen: dict[tuple[int, str], tuple[int, int]] = {}
    last_id: dict[str, int] = {}
    for p in sorted(seen, key=lambda p: (p.partition, p.offset)):
        if p.outbox_id is None or (p.partition, p.outbox_id) in first_seen:
            continue
        first_seen[(p.partition, p.outbox_id)] = (p.partition, p.offset)
        oid = int(p.outbox_id)
        if oid < last_id.get(p.identity.event_id, -1):
            report.out_of_order_keys += 1
        last_id[p.identity.event_id] = max(oid, last_id.get(p.identity.event_id, -1))
    return report


def format_table(rows: Sequence[tuple[str, object]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)
