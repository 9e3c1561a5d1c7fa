"""Slot pruning: deletes cluster-once slot claims older than the retention, in batches."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from streams.timers.ports import TimerStore


@dataclass(frozen=True)
class PruneResult:
    deleted: int

    def summary(self) -> dict[str, int]:
        return {"deleted": self.deleted}


class SlotPruner:
    """Handler that deletes slot claims older than ``retention``; register it like any schedule."""

    def __init__(
        self, store: TimerStore, retention: timedelta = timedelta(days=7), batch: int = 10_000
    ) -> None:
        self._store = store
        self._retention = retention
        self._batch = batch

    async def run_once(self, as_of: datetime) -> PruneResult:
        deleted = 0
        while True:
            n = await self._store.prune_slots(as_of - self._retention, self._batch)
            deleted += n
            if n < self._batch:
                return PruneResult(deleted)
