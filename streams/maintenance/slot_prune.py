"""Slot pruning: deletes cluster-once slot claims older than the retention, in batches."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from streams.clock import Clock, SystemClock
from streams.maintenance.drain import drain
from streams.maintenance.metrics import RetentionMetrics
from streams.timers.context import RunContext
from streams.timers.ports import TimerStore

SLOTS = "ops.timer_slots"


@dataclass(frozen=True)
class PruneResult:
    deleted: int
    more: bool = False

    def summary(self) -> dict[str, object]:
        return {"deleted": self.deleted, "more": self.more}


class SlotPruner:
    """Handler that deletes slot claims older than ``retention``; register it like any schedule."""

    def __init__(
        self,
        store: TimerStore,
        retention: timedelta = timedelta(days=7),
        batch: int = 10_000,
        *,
        metrics: RetentionMetrics | None = None,
        budget: timedelta = timedelta(minutes=4),
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self.retention = retention
        self._batch = batch
        self._metrics = metrics
        self._budget = budget
        self._clock: Clock = clock or SystemClock()

    async def run_once(self, ctx: RunContext) -> PruneResult:
        as_of = ctx.as_of
        before = as_of - self.retention
        done = await drain(
            lambda: self._store.prune_slots(before, self._batch),
            size=self._batch,
            budget_seconds=self._budget.total_seconds(),
            clock=self._clock,
        )
        if self._metrics is not None:
            self._metrics.record(SLOTS, done, as_of)
        return PruneResult(done.rows, done.more)
