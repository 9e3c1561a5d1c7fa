"""Outbox records: what producers of events write, and how a row looks on the Kafka wire."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import db.outbox
from db.connector import Connection
from streams import tracing
from streams.contracts import Contract, ContractTooLarge, TopicContract

M = TypeVar("M", bound=Contract)

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
        check_headers(self.headers)

    @classmethod
    def _made(cls, topic: str, key: str, payload: str, headers: dict[str, str]) -> OutboxRecord:
        """A record from ``RecordMaker``, whose topic and headers were checked once for all
        its records and whose key and payload are str by construction: ``__post_init__``'s
        checks again for every row were about a sixth of building a record."""
        record = object.__new__(cls)
        _set(record, "topic", topic)
        _set(record, "key", key)
        _set(record, "payload", payload)
        _set(record, "headers", headers)
        return record


_set = object.__setattr__


def check_headers(headers: Mapping[str, str]) -> None:
    """Header names are non-empty strings, values strings, none set by the relay."""
    for name, value in headers.items():
        if not isinstance(name, str) or not name:
            raise ValueError("outbox header names must be non-empty strings")
        if not isinstance(value, str):
            raise ValueError(f"outbox header {name!r} must have a str value")
        if name in RESERVED_HEADERS:
            raise ValueError(f"outbox header {name!r} is set by the relay")


def contract_headers(
    contract: TopicContract[Any], headers: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``headers`` and the contract's own (its ContractVersion and event type), checked: the
    headers of every record of ``contract`` that carries ``headers``."""
    extra = dict(headers or {})
    if CONTRACT_VERSION_HEADER in extra or EVENT_TYPE_HEADER in extra:
        clash = sorted({CONTRACT_VERSION_HEADER, EVENT_TYPE_HEADER} & extra.keys())
        raise ValueError(f"headers {clash} are set from the contract, do not pass them")
    model = contract.model
    # Every contract's ContractVersion is a Literal of one value: the field's default.
    extra[CONTRACT_VERSION_HEADER] = str(model.model_fields["contract_version"].default)
    extra[EVENT_TYPE_HEADER] = model.__name__
    check_headers(extra)
    return extra


class RecordMaker(Generic[M]):
    """Builds the outbox records of ``contract``'s messages that carry the same ``headers``
    (a batch's, a run's): what ``record_for`` does for one message, with the topic, the
    headers and the contract's own headers worked out once, not once per record.

    Records made by one maker share one headers dict while tracing is off (treat a record's
    headers as read-only; none of this code writes to them). With tracing on, each record's
    headers start with the traceparent of the span current when it is made."""

    __slots__ = ("_contract", "_headers", "_key", "_max", "_model", "_topic")

    def __init__(
        self,
        contract: TopicContract[M],
        *,
        topic_prefix: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        extra = contract_headers(contract, headers)
        self._contract = contract
        self._model = contract.model
        self._key = contract.key
        self._max = contract.max_payload_bytes
        self._topic = f"{topic_prefix}{contract.name}"
        self._headers = extra

    def __call__(self, message: M) -> OutboxRecord:
        """The outbox record for ``message``. Raises ``ContractTooLarge`` when the serialized
        message breaks the size contract, ``TypeError`` for a message of another model."""
        headers = self._headers
        if type(message) is not self._model:
            headers = self._subclass_headers(message)
        payload = message.to_json()
        if len(payload) > self._max:
            raise ContractTooLarge(self._contract.name, len(payload), self._max)
        if tracing.enabled():
            # traceparent of the span current now; the caller's and the contract's win.
            headers = {**tracing.headers(), **headers}
        return OutboxRecord._made(self._topic, self._key(message), payload.decode(), headers)

    def _subclass_headers(self, message: object) -> dict[str, str]:
        """A message of a subclass of the contract's model carries its own event type (and
        version); anything else is refused."""
        if not isinstance(message, self._model):
            raise TypeError(
                f"{type(message).__name__} is not the message of {self._contract.name} "
                f"({self._model.__name__})"
            )
        return {
            **self._headers,
            CONTRACT_VERSION_HEADER: str(message.contract_version),
            EVENT_TYPE_HEADER: type(message).__name__,
        }


def record_for(
    contract: TopicContract[Any],
    message: Contract,
    *,
    topic_prefix: str = "",
    headers: Mapping[str, str] | None = None,
) -> OutboxRecord:
    """The outbox record for ``message`` on ``contract``'s topic, keyed as the contract says.
    Raises ``ContractTooLarge`` when the serialized message breaks the size contract. For
    many messages with the same headers, ``RecordMaker`` does the per-batch part once."""
    return RecordMaker(contract, topic_prefix=topic_prefix, headers=headers)(message)


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
