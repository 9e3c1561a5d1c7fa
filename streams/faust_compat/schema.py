"""A Faust schema for raw input bytes, overriding ``Schema.compile``.

Faust's own schema with ``key_type=bytes`` and the "raw" codec returns the same keys and
values, but runs its serializer registry twice for every record of every input. The
override relies on how Faust calls ``compile`` (``schema.compile(app, on_key_decode_error=,
on_value_decode_error=, default_propagate=)``) and on the decoder it returns
(``decode(message, *, propagate=...)``): check() reads both in the installed Faust.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import faust
from faust.types import AppT, EventT
from faust.types.tuples import Message

from streams.faust_compat.errors import (
    FAUST,
    FaustCompatError,
    qualname,
    signature,
    source_says,
)

COMPILE_KEYWORDS = ("on_key_decode_error", "on_value_decode_error", "default_propagate")


class RawBytes(faust.Schema[bytes | None, bytes | None]):
    """Keys and values exactly as the broker holds them (bytes, or None for a tombstone)."""

    def compile(self, app: AppT, **_: Any) -> Callable[..., Awaitable[EventT[Any]]]:
        create_event = app.create_event

        async def decode(message: Message, *, propagate: bool = False) -> EventT[Any]:
            return create_event(message.key, message.value, message.headers, message)

        return decode


def check() -> None:
    name = f"{qualname(faust.Schema)}.compile"
    signature(faust.Schema.compile, ["self", "app"], FAUST, name)
    params = inspect.signature(faust.Schema.compile).parameters
    keywords = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    if keywords != list(COMPILE_KEYWORDS):
        raise FaustCompatError(FAUST, name, f"takes keywords {keywords}, not {COMPILE_KEYWORDS}")
    source_says(faust.Schema.compile, "message: Message, *, propagate: bool", FAUST, name)
