"""The batched cache writes (streams/tables/cache.py) encode keys and values themselves:
the bytes must be what Faust's JSON table schema makes of them, or a worker recovering
the table from its changelog, or reading its own RocksDB, would not find them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import faust
import pytest

from streams.faust_compat import json_bytes

SAMPLES: list[Any] = [
    "6f0c7f8e-5b0a-4d6c-9a53-2f1f4b7f7c11",
    "Ünïcödé ключ 🔑",
    {"v": 3, "fp": "0a1b2c3d4e5f60718293a4b5"},
    {"doc-1": [30, 14, 7], "doc-2": [], "nested": {"a": None, "b": True, "c": 1.5}},
    [1, "two", None, False],
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=UTC),
]


@pytest.fixture(scope="module")
def store() -> Any:
    app = faust.App("cache-encoding", store="memory://")
    table = app.Table(
        "t", default=None, schema=faust.Schema(key_serializer="json", value_serializer="json")
    )
    return table.data


@pytest.mark.parametrize("value", SAMPLES, ids=[type(v).__name__ for v in SAMPLES])
def test_keys_and_values_are_encoded_as_faust_encodes_them(store: Any, value: Any) -> None:
    assert json_bytes(value) == store._encode_key(value)
    assert json_bytes(value) == store._encode_value(value)
