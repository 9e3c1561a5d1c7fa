"""Auditor of the output topics: reads a topic (and only the topic) to its end offsets and
compares what is there with the effects that must be there.

``audit`` is the calendar reminders' detailed audit (lateness, per-key order);
``audit_effects`` is the one rule for all three slices' effects (calendar reminders,
document-expiry (DocumentId, threshold) items, automation SchedulerKeys), and
``matrix_rows`` / ``format_matrix`` make the fault matrix's table from it.

Counts, per SPEC §4: a reminder is *lost* when expected and absent; a *duplicated effect*
is a second outbox record (a different ``outbox-id``) for the same reminder identity or a
second ReminderId for it; a *re-publish* is the same outbox record on the topic again
(same ``outbox-id``), which at-least-once delivery allows; *unexpected* reminders are ones
for cancelled events, superseded (rescheduled) due times or events never produced.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar, cast

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from devkit.loads.calendar_load import Identity, parse_time
from devkit.wait import eventually

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
    await eventually(
        consumer.assignment,
        timeout=timeout,
        what=f"partitions of topic {topic} (does it exist?)",
        interval=0.1,
    )
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


# ---------------------------------------------------------------------- the three slices

K = TypeVar("K", bound=Hashable)
EXPIRY_TOPIC = "pin.profile.document-expiry-reminders.v1"
DISPATCH_TOPIC = "pin.automation.dispatch-requested.v1"


@dataclass(frozen=True)
class Effect:
    """One effect read from an output topic: its identity in the seed's terms, the outbox
    record that carried it, and where and when it was on the topic."""

    key: Hashable
    outbox_id: str | None
    timestamp: datetime
    partition: int
    offset: int
    alias: str | None = None
    """A second name the product gives the same effect (calendar: ReminderId)."""


def _headers(record: ConsumerRecord[bytes, bytes]) -> dict[str, str]:
    return {k: v.decode() for k, v in record.headers or ()}


def _timestamp(record: ConsumerRecord[bytes, bytes]) -> datetime:
    return datetime.fromtimestamp(record.timestamp / 1000, tz=UTC)


def calendar_effects(records: Sequence[ConsumerRecord[bytes, bytes]]) -> list[Effect]:
    """pin.calendar.reminder-due.v1: one effect per record, keyed by the reminder identity
    (event, offset, due time); the ReminderId must be one per identity."""
    out = []
    for r in records:
        p = decode(r)
        out.append(
            Effect(p.identity, p.outbox_id, p.timestamp, p.partition, p.offset, p.reminder_id)
        )
    return out


def expiry_effects(records: Sequence[ConsumerRecord[bytes, bytes]]) -> list[Effect]:
    """pin.profile.document-expiry-reminders.v1: one effect per (DocumentId, ThresholdDays)
    item of each owner's event (seed 001: one reminder per document and threshold, ever)."""
    out = []
    for r in records:
        body = json.loads(r.value or b"null")
        oid = _headers(r).get("outbox-id")
        for d in body["Documents"]:
            key = (d["DocumentId"], int(d["ThresholdDays"]))
            out.append(Effect(key, oid, _timestamp(r), r.partition, r.offset))
    return out


def dispatch_effects(records: Sequence[ConsumerRecord[bytes, bytes]]) -> list[Effect]:
    """pin.automation.dispatch-requested.v1: one effect per record, keyed by SchedulerKey
    (seed 003: a Completed row is never dispatched again)."""
    out = []
    for r in records:
        body = json.loads(r.value or b"null")
        oid = _headers(r).get("outbox-id")
        out.append(Effect(body["SchedulerKey"], oid, _timestamp(r), r.partition, r.offset))
    return out


@dataclass
class EffectAudit:
    """Expected effects against the effects on the topic.

    *doubled*: an effect carried by more than one outbox record (or under two aliases) - a
    second effect the product promised not to make. *Re-published*: the same outbox record
    (same ``outbox-id`` header) on the topic again, which the relay's at-least-once delivery
    allows after a crash and consumers dedupe. *wrong*: an effect no newest state wants.
    """

    expected: int = 0
    published: int = 0
    missing: list[Hashable] = field(default_factory=list)
    doubled: list[Hashable] = field(default_factory=list)
    republished: int = 0
    republished_by_key: Counter[Hashable] = field(default_factory=Counter)
    """Per effect, its records on the topic beyond one per outbox record."""
    wrong: dict[Hashable, str] = field(default_factory=dict)
    first_seen: dict[Hashable, datetime] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.missing or self.doubled or self.wrong)


def audit_effects(
    effects: Sequence[Effect], expected: Mapping[K, object], forbidden: Mapping[K, str]
) -> EffectAudit:
    out = EffectAudit(expected=len(expected))
    reasons = cast("Mapping[Hashable, str]", forbidden)  # K only ties the two mappings
    by_key: dict[Hashable, list[Effect]] = defaultdict(list)
    for e in effects:
        by_key[e.key].append(e)
    for key, found in by_key.items():
        outbox_ids = {e.outbox_id for e in found}
        aliases = {e.alias for e in found}
        out.first_seen[key] = min(e.timestamp for e in found)
        if len(outbox_ids) > 1 or len(aliases) > 1 or None in outbox_ids:
            out.doubled.append(key)
            out.details.append(f"doubled {key}: outbox ids {sorted(map(str, outbox_ids))}")
        again = len(found) - len(outbox_ids)
        out.republished += again
        if again:
            out.republished_by_key[key] = again
        if key in expected:
            out.published += 1
        else:
            out.wrong[key] = reasons.get(key, "never wanted")
            out.details.append(f"wrong ({out.wrong[key]}) {key}")
    out.missing = [k for k in expected if k not in by_key]
    out.details.extend(f"missing {k}" for k in out.missing)
    return out


@dataclass(frozen=True)
class FaultWindow:
    """A fault as the matrix injected it: its name and when it was in force (wall clock)."""

    name: str
    began: datetime
    ended: datetime


def attribute(
    spans: Sequence[tuple[datetime, datetime]], faults: Sequence[FaultWindow], slack: timedelta
) -> list[str]:
    """The faults in force at some time of any of ``spans`` (each widened by ``slack``)."""
    return sorted(
        {
            f.name
            for lo, hi in spans
            for f in faults
            if f.began <= hi + slack and f.ended >= lo - slack
        }
    )


def matrix_rows(
    slice_name: str,
    result: EffectAudit,
    spans: Mapping[K, Sequence[tuple[datetime, datetime]]],
    faults: Sequence[FaultWindow],
    slack: timedelta,
) -> list[tuple[str, str, int, int, int, int, int, int]]:
    """Rows (slice, fault, expected, published, missing, doubled, wrong, re-published).

    ``spans`` holds each effect's exposure: when the inputs of its entity were in flight
    and when it came due (or its run). An effect counts in the row of every fault in force
    during its exposure ("no fault" when none), and once in the slice's "all" row; an
    effect without a span is placed at the time it was first on the topic. Re-published
    counts the records beyond one per outbox record (same ``outbox-id``: consumers dedupe
    them, so they do not fail the run; a relay that re-sends after a broker failover shows
    here, apart from the doubled effects that do).
    """
    exposure = cast("Mapping[Hashable, Sequence[tuple[datetime, datetime]]]", spans)
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    missing, doubled = set(result.missing), set(result.doubled)
    keys = set(result.missing) | set(result.first_seen)
    for key in keys:
        seen = result.first_seen.get(key)
        span = exposure.get(key) or ([(seen, seen)] if seen is not None else [])
        names = attribute(span, faults, slack) or ["no fault"]
        for name in [*names, "all"]:
            c = counts[name]
            if key not in result.wrong:
                c["expected"] += 1
                c["published"] += key not in missing
            c["missing"] += key in missing
            c["doubled"] += key in doubled
            c["wrong"] += key in result.wrong
            c["re-published"] += result.republished_by_key.get(key, 0)
    order = sorted((n for n in counts if n != "all"), key=lambda n: (n == "no fault", n))
    return [
        (
            slice_name,
            name,
            counts[name]["expected"],
            counts[name]["published"],
            counts[name]["missing"],
            counts[name]["doubled"],
            counts[name]["wrong"],
            counts[name]["re-published"],
        )
        for name in [*order, "all"]
        if name in counts
    ]


def format_matrix(rows: Sequence[tuple[str, str, int, int, int, int, int, int]]) -> str:
    head = (
        "slice",
        "fault",
        "expected",
        "published",
        "missing",
        "doubled",
        "wrong",
        "re-published",
    )
    table = [tuple(map(str, head)), *(tuple(map(str, r)) for r in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    lines = []
    for i, r in enumerate(table):
        cells = [r[0].ljust(widths[0]), r[1].ljust(widths[1])]
        cells += [c.rjust(w) for c, w in zip(r[2:], widths[2:], strict=True)]
        lines.append("  " + "  ".join(cells))
        if i == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    return "\n".join(lines)
