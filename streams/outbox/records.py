"""Outbox records: what producers of events write, and how a row looks on the Kafka wire."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import db.outbox
from db.connector import Connection
from streams import tracing
from streams.contracts import Contract, ContractTooLarge, TopicContract

# The row id, as ASCII digits; consumers dedupe re-publishes on it.
OUTBOX_ID_HEADER = "outbox-id"
CONTRACT_VERSION_HEADER = "contract-version"
EVENT_TYPE_HEADER = "event-type"
RESERVED_HEADERS = frozenset({OUTBOX_ID_HEADER})

KafkaHeaders = list[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class OutboxRecord:
    """One integration event to publish: topic, key, JSON payload text, string headers."""

    topic: str
    key: str
    payload: str
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError("outbox record needs a non-empty topic")
        if not isinstance(self.key, str):
            raise ValueError(f"outbox record key must be str, not {type(self.key).__name__}")
        if not isinstance(self.payload, str):
            raise ValueError(
                f"outbox record payload must be JSON text (str), not {type(self.payload).__name__}"
            )
        for name, value in self.headers.items():
            if not isinstance(name, str) or not name:
                raise ValueError("outbox header names must be non-empty strings")
            if not isinstance(value, str):
                raise ValueError(f"outbox header {name!r} must have a str value")
            if name in RESERVED_HEADERS:
                raise ValueError(f"outbox header {name!r} is set by the relay")


def record_for(
    contract: TopicContract[Any],
    message: Contract,
    *,
    topic_prefix: str = "",
    headers: Mapping[str, str] | None = None,
) -> OutboxRecord:
    """The outbox record for ``message`` on ``contract``'s topic, keyed as the contract says.
    Raises ``ContractTooLarge`` when the serialized message breaks the size contract."""
    if not isinstance(message, contract.model):
        raise TypeError(
            f"{type(message).__name__} is not the message of {contract.name} "
            f"({contract.model.__name__})"
        )
    own = {
        CONTRACT_VERSION_HEADER: str(message.contract_version),
        EVENT_TYPE_HEADER: type(message).__name__,
    }
    extra = headers or {}
    if CONTRACT_VERSION_HEADER in extra or EVENT_TYPE_HEADER in extra:
        clash = sorted(own.keys() & extra.keys())
        raise ValueError(f"headers {clash} are set from the contract, do not pass them")
    payload = message.to_json()
    if len(payload) > contract.max_payload_bytes:
        raise ContractTooLarge(contract.name, len(payload), contract.max_payload_bytes)
    return OutboxRecord(
        topic=f"{topic_prefix}{contract.name}",
        key=contract.key(message),
        payload=payload.decode("utf-8"),
        # traceparent of the span current now (none while tracing is off: headers unchanged).
        headers={**tracing.headers(), **extra, **own},
    )


async def insert_many(conn: Connection, records: Sequence[OutboxRecord]) -> list[int]:
    """Write ``records`` with one statement on the caller's transaction connection, so they
    commit or roll back with the caller's state change. Returns the ids in input order."""
    if not records:
        return []
    return await db.outbox.insert_many(conn, *columns(records))


def columns(records: Sequence[OutboxRecord]) -> db.outbox.OutboxColumns:
    """``records`` column-wise, as the outbox's insert statements take them."""
    return (
        [r.topic for r in records],
        [r.key for r in records],
        [r.payload for r in records],
        headers_json(records),
    )


def headers_json(records: Sequence[OutboxRecord]) -> list[str]:
    """Each record's headers as JSON text. A batch's records mostly carry equal headers (the
    run's correlation id, the contract's own): each run of equal ones is encoded once."""
    out: list[str] = []
    last: dict[str, str] | None = None
    text = ""
    for r in records:
        if r.headers != last:
            last, text = r.headers, json.dumps(r.headers)
        out.append(text)
    return out


def row_of(record: OutboxRecord) -> db.outbox.OutboxRow:
    """One record as the insert statements take it (``columns`` for a single record)."""
    return (record.topic, record.key, record.payload, json.dumps(record.headers))


def wire_headers(outbox_id: int, headers: Mapping[str, str]) -> KafkaHeaders:
    """Kafka headers of a published row: ``outbox-id`` first, then the row's own."""
    out: KafkaHeaders = [(OUTBOX_ID_HEADER, str(outbox_id).encode("ascii"))]
    out.extend((name, value.encode("utf-8")) for name, value in headers.items())
    return out


def outbox_id_of(headers: Sequence[tuple[str, bytes]]) -> int | None:
    """The outbox id a consumer dedupes on, or None for a record that did not come from here."""
    for name, value in headers:
        if name == OUTBOX_ID_HEADER:
            return int(value.decode("ascii"))
    return None
