"""What a cache table's writes need from Faust beyond its public table API.

- ``faust.streams._current_event``: the stream's current event, which a table write reads
  to pick the changelog partition. Batches lose it, so the cache sets it per write.
- Faust's "json" codec, without its serializer registry and codec layers per record: the
  standard library's encoder, compact separators, Faust's fallback for other types
  (``faust.utils.json.dumps`` without orjson). check() compares it with Faust's own.
- ``Producer._ensure_producer`` of Faust's aiokafka driver: the aiokafka producer Faust
  started, which sends the cache's changelog records as whole batches.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from faust import streams as faust_streams
from faust.serializers import codecs
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import EventT
from faust.utils.json import on_default

from streams.faust_compat.errors import (
    FAUST,
    FaustCompatError,
    attr,
    method,
    qualname,
    source_says,
)

CURRENT_EVENT = "_current_event"
ENSURE_PRODUCER = "_ensure_producer"

_encode_json = json.JSONEncoder(separators=(",", ":"), default=on_default).encode

# Values whose encoding check() compares with Faust's codec (a fallback type included).
JSON_SAMPLES: list[Any] = [
    "Ünïcödé 🔑",
    {"v": 3, "nested": {"a": None, "b": True, "c": 1.5}, "l": [1, "two"]},
    UUID("12345678-1234-5678-1234-567812345678"),
    datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=UTC),
]


def _current_event_var() -> ContextVar[Any]:
    var = attr(faust_streams, CURRENT_EVENT, FAUST, "faust.streams")
    if not isinstance(var, ContextVar):
        raise FaustCompatError(
            FAUST, f"faust.streams.{CURRENT_EVENT}", f"is a {type(var).__name__}"
        )
    return var


@contextmanager
def in_event(event: EventT[Any]) -> Iterator[None]:
    """Make ``event`` the stream's current event, so a table write goes to the changelog
    partition of the message it came from (Faust needs that context; batches lose it)."""
    var = _current_event_var()
    token = var.set(weakref.ref(event))
    try:
        yield
    finally:
        var.reset(token)


def json_bytes(obj: Any) -> bytes:
    """A key or value as a table with ``Schema(key_serializer="json",
    value_serializer="json")`` stores it."""
    return _encode_json(obj).encode()


def changelog_producer(faust_producer: object) -> Any:
    """The aiokafka producer under Faust's producer (started by Faust with the app)."""
    return attr(faust_producer, ENSURE_PRODUCER, FAUST, qualname(faust_aiokafka.Producer))()


def check() -> None:
    _current_event_var()
    # Faust's table writes find the event through current_event(), which reads that var.
    source_says(
        faust_streams.current_event, "_current_event.get", FAUST, "faust.streams.current_event"
    )
    for sample in JSON_SAMPLES:
        if json_bytes(sample) != codecs.dumps("json", sample):
            raise FaustCompatError(
                FAUST, "the json codec", f"encodes {type(sample).__name__} differently"
            )
    method(faust_aiokafka.Producer, ENSURE_PRODUCER, [], FAUST)
