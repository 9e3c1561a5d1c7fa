"""Input topics hand their records' bytes over through RawBytes (streams/topics.py): the
same keys and values Faust's own schema for bytes with the "raw" codec gives."""

from __future__ import annotations

from typing import Any

import faust
import pytest
from faust.types.tuples import Message

from streams.topics import RawBytes

RECORDS = [(b"key", b'{"EventId": 1}'), (None, b"\x00\xff not json"), (b"k", None), (None, None)]


def record(key: bytes | None, value: bytes | None) -> Message:
    return Message(
        topic="t", partition=1, offset=7, timestamp=0.0, timestamp_type=0,
        headers=[("h", b"1")], key=key, value=value, checksum=None,
    )  # fmt: skip


@pytest.mark.parametrize(("key", "value"), RECORDS)
async def test_raw_bytes_decode_as_faust_raw_schema_does(
    key: bytes | None, value: bytes | None
) -> None:
    app = faust.App("raw-topics")
    options: dict[str, Any] = {
        "key_type": bytes,
        "value_type": bytes,
        "key_serializer": "raw",
        "value_serializer": "raw",
    }
    ours = await RawBytes(**options).compile(app)(record(key, value))
    faust_own = await faust.Schema(**options).compile(app)(record(key, value))
    assert (ours.key, ours.value) == (faust_own.key, faust_own.value) == (key, value)
    assert ours.message.offset == 7 and ours.headers == faust_own.headers
