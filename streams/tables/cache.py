"""A per-key cache on a changelog-backed Faust table, written from batched (noack) processing."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from faust.streams import _current_event
from faust.types import EventT, TableT

from streams.metrics import AgentMetrics


@contextmanager
def in_event(event: EventT[Any]) -> Iterator[None]:
    """Make ``event`` the stream's current event, so a table write goes to the changelog
    partition of the message it came from (Faust needs that context; batches lose it)."""
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


def approximate_keys(table: TableT[Any, Any]) -> int | None:
    """The table's key count without walking it: RocksDB's own estimate per partition
    database (``len()`` of a RocksDB-backed table iterates every key, on every refresh)."""
    store = getattr(table, "data", None)
    dbs = getattr(store, "_dbs", None)
    if isinstance(dbs, dict):
        total = 0
        for db in dbs.values():
            prop = getattr(db, "property_int_value", None)
            if prop is None:
                return None  # not rocksdict: no cheap count
            total += int(prop("rocksdb.estimate-num-keys") or 0)
        return total
    inner = getattr(store, "data", None)
    if isinstance(inner, dict):  # faust's in-memory store keeps a plain dict: len() is O(1)
        return len(inner)
    return None


class KeyCache:
    """Counts hits and misses; the value is whatever the owning agent stores (JSON-able)."""

    def __init__(self, table: TableT[Any, Any], metrics: AgentMetrics) -> None:
        self.table = table
        self.name = table.name
        self._hit = metrics.cache.labels(self.name, "hit")
        self._miss = metrics.cache.labels(self.name, "miss")
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> Any:
        value = self.table.get(key)
        if value is None:
            self.misses += 1
            self._miss.inc()
        else:
            self.hits += 1
            self._hit.inc()
        return value

    def peek(self, key: str) -> Any:
        """The value without counting it: for callers that decide afterwards whether the
        cache answered (``record``), e.g. only once its claim has been verified."""
        return self.table.get(key)

    def record(self, hit: bool, n: int = 1) -> None:
        """Count ``n`` lookups the caller settled (hit) or had to ask PostgreSQL about (miss)."""
        if n <= 0:
            return
        if hit:
            self.hits += n
            self._hit.inc(n)
        else:
            self.misses += n
            self._miss.inc(n)

    def put(self, event: EventT[Any], key: str, value: Any) -> None:
        with in_event(event):
            self.table[key] = value

    def stats(self) -> dict[str, Any]:
        total = self.hits + self.misses
        return {
            "table": self.name,
            "keys": approximate_keys(self.table),
            "hits": self.hits,
            "misses": self.misses,
            "hit_ratio": round(self.hits / total, 4) if total else None,
        }
