"""Outbox retention: deletes published rows older than the retention period, in bounded chunks."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import db.outbox as repo
from db.connector import connection
from streams import logs
from streams.clock import Clock, SystemClock
from streams.maintenance.drain import drain
from streams.maintenance.metrics import RetentionMetrics
from streams.metrics import OutboxMetrics
from streams.settings import Settings
from streams.timers.context import RunContext

OUTBOX_TABLE = "ops.outbox"

# Under the outbox's logger names: log filters and dashboards select the outbox's lines by
# that prefix.
log = logging.getLogger("streams.outbox.retention")


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    retention: timedelta = timedelta(hours=24)
    """Published rows are kept this long (for audits and re-drives), then deleted."""
    chunk_size: int = 5_000
    """Rows per DELETE: each chunk is its own short transaction."""
    budget: timedelta = timedelta(minutes=4)
    """A run deletes chunks until one comes back short (drained to the horizon) or this is
    spent (under the schedule's 5 min max duration); then ``RetentionResult.more``."""

    def __post_init__(self) -> None:
        if self.retention < timedelta(0):
            raise ValueError("RetentionConfig.retention must not be negative")
        if self.chunk_size < 1:
            raise ValueError("RetentionConfig.chunk_size must be >= 1")
        if self.budget <= timedelta(0):
            raise ValueError("RetentionConfig.budget must be positive")

    @classmethod
    def from_settings(cls, settings: Settings) -> RetentionConfig:
        return cls(
            retention=timedelta(hours=settings.outbox_retention_hours),
            chunk_size=settings.retention_batch_size,
            budget=timedelta(seconds=settings.retention_budget_seconds),
        )


@dataclass(frozen=True, slots=True)
class RetentionResult:
    cutoff: datetime
    """Rows published before this instant were eligible."""
    deleted: int
    chunks: int
    more: bool
    """The run's budget ran out with eligible rows possibly left."""
    seconds: float = 0.0

    def summary(self) -> dict[str, object]:
        return {
            "cutoff": self.cutoff.isoformat(),
            "deleted": self.deleted,
            "chunks": self.chunks,
            "more": self.more,
            "rows_per_second": round(self.deleted / self.seconds) if self.seconds > 0 else None,
        }


class OutboxRetention:
    """A timer job: ``run_once(ctx)`` deletes rows published before ``as_of - retention``."""

    def __init__(
        self,
        pool: Any,
        *,
        metrics: OutboxMetrics,
        config: RetentionConfig | None = None,
        clock: Clock | None = None,
        retention_metrics: RetentionMetrics | None = None,
    ) -> None:
        self.config = config or RetentionConfig()
        self._pool = pool
        self._metrics = metrics
        self._clock: Clock = clock or SystemClock()
        self._retention_metrics = retention_metrics

    async def _chunk(self, cutoff: datetime) -> int:
        async with connection(self._pool) as conn:
            n = await repo.published_delete(conn, cutoff, self.config.chunk_size)
        self._metrics.deleted.inc(n)
        return n

    async def run_once(self, ctx: RunContext) -> RetentionResult:
        as_of = ctx.as_of
        if as_of.tzinfo is None:
            raise ValueError("as_of must be timezone-aware")
        cutoff = as_of - self.config.retention
        done = await drain(
            lambda: self._chunk(cutoff),
            size=self.config.chunk_size,
            budget_seconds=self.config.budget.total_seconds(),
            clock=self._clock,
        )
        if self._retention_metrics is not None:
            self._retention_metrics.record(OUTBOX_TABLE, done, as_of)
        logs.event(
            log,
            logging.INFO,
            "outbox_retention",
            cutoff=cutoff.isoformat(),
            deleted=done.rows,
            chunks=done.batches,
            more=done.more,
            rows_per_second=done.rows_per_second,
        )
        return RetentionResult(
            cutoff=cutoff,
            deleted=done.rows,
            chunks=done.batches,
            more=done.more,
            seconds=done.seconds,
        )
