"""Pure rules of a DLQ replay: which topic, from when, and what to do with each record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from streams.contracts import DLQ_SUFFIX
from streams.dlq.redact import H_REDACTED
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
# A selective replay (one record, or one reason) passes over the other records.
SKIP_NOT_SELECTED = "not-selected"
# Written without the contract's secret fields (streams/dlq/redact.py): not what the producer
# sent, so never put back on a topic other teams read; the producer re-sends the original.
SKIP_REDACTED = "redacted"
REDACTED_HINT = (
    "records dead-lettered without their secret fields ({fields}) are not replayed: they"
    " are not what the producer sent; ask the producer to re-send them (source partition"
    " and offset are in each record's headers)"
)


class ReplayUsageError(Exception):
    """The command was asked for something that cannot be: unknown topic, bad --since."""


def input_topic_names() -> list[str]:
    from streams.slices import catalogue

    return [c.name for c in catalogue() if c.direction == "in"]


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
    # Fields the DLQ copy was written without ("*": the whole value withheld).
    redacted: tuple[str, ...] = ()


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
    redacted = _header(headers, H_REDACTED)
    if redacted is not None:
        fields = tuple(f for f in _text(redacted).split(",") if f) or ("*",)
        return replace(base, skip=SKIP_REDACTED, redacted=fields)
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
