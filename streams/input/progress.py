"""Is each input partition moving? Per-partition progress, stall detection, DLQ reason counts.

An agent that waits (an unwell database it retries, a message that somehow never passes)
answers nothing by itself; what shows it is a partition that has lag and whose position
has not moved for a while. ``/health`` turns not-ready on that, ``/status`` shows it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

# Distinct (kind, reason) pairs remembered per consumer; the rest are counted as "other".
MAX_REASONS = 50


@dataclass(frozen=True)
class Stall:
    partition: Any
    lag: int
    seconds: float


class PartitionProgress:
    """The next offset each partition will process, and when it last moved (monotonic)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._next: dict[Hashable, int] = {}
        self._moved_at: dict[Hashable, float] = {}
        self._stamp: dict[Hashable, float] = {}

    def advanced(self, events: Iterable[Any]) -> None:
        """Record a handled batch (faust events: ``event.message.tp`` and ``.offset``)."""
        now = self._clock()
        for event in events:
            tp, offset = event.message.tp, event.message.offset
            if offset + 1 > self._next.get(tp, -1):
                self._next[tp] = offset + 1
                self._moved_at[tp] = now
                stamp = getattr(event.message, "timestamp", None)
                if stamp is not None:
                    self._stamp[tp] = float(stamp)

    def last_timestamp(self, partition: Hashable) -> float | None:
        """The timestamp of the last handled record of ``partition`` (Unix seconds)."""
        return self._stamp.get(partition)

    def position(self, partition: Hashable) -> int | None:
        return self._next.get(partition)

    def check(
        self,
        partition: Hashable,
        *,
        highwater: int | None,
        committed: int | None,
        limit_seconds: float,
    ) -> Stall | None:
        """A stall when the partition has lag and has not moved for ``limit_seconds``.

        The committed offset is a floor of the position: every record below it was handled,
        here or by the worker that held the partition meanwhile (a partition handed back
        by a rebalance carries the position this worker reached before it lost it, and with
        no new record nothing here would ever move it past that). Before the first handled
        batch the committed offset is the position and the first check starts the clock (a
        worker blocked on its very first message).
        """
        now = self._clock()
        floor = committed if committed is not None else 0
        own = self._next.get(partition)
        if own is None or floor > own:
            self._next[partition] = floor
            if own is not None:
                self._moved_at[partition] = now  # moved by the committed offset
        position = self._next[partition]
        lag = 0 if highwater is None else max(0, highwater - position)
        if lag == 0:
            self._moved_at[partition] = now
            return None
        since = self._moved_at.setdefault(partition, now)
        waited = now - since
        if waited < limit_seconds:
            return None
        return Stall(partition, lag, round(waited, 1))

    def revoked(self, partitions: Iterable[Hashable]) -> None:
        """Drop what was recorded for ``partitions`` (a rebalance took them away; if one
        comes back, it starts again from the offset committed for it then)."""
        for tp in partitions:
            self._next.pop(tp, None)
            self._moved_at.pop(tp, None)
            self._stamp.pop(tp, None)

    def forget(self, keep: Iterable[Hashable]) -> None:
        """Drop partitions no longer assigned (after a rebalance)."""
        kept = set(keep)
        for d in (self._next, self._moved_at, self._stamp):
            for tp in [tp for tp in d if tp not in kept]:
                del d[tp]


class ReasonCounts:
    """DLQ records by kind and by reason (bounded: reasons are free text)."""

    def __init__(self, max_reasons: int = MAX_REASONS) -> None:
        self._max = max_reasons
        self.by_kind: Counter[str] = Counter()
        self.by_reason: Counter[tuple[str, str]] = Counter()

    def add(self, kind: str, reason: str) -> None:
        self.by_kind[kind] += 1
        key = (kind, reason[:200])
        if key in self.by_reason or len(self.by_reason) < self._max:
            self.by_reason[key] += 1
        else:
            self.by_reason[(kind, "other")] += 1

    def snapshot(self, top: int = 10) -> dict[str, Any]:
        return {
            "by_kind": dict(self.by_kind),
            "top_reasons": [
                {"kind": k, "reason": r, "count": n}
                for (k, r), n in self.by_reason.most_common(top)
            ],
        }
