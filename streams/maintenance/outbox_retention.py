"""Outbox retention: deletes published rows older than the retention period, in bounded chunks."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import db.outbox as repo
from db.connector import connection
from streams.metrics import OutboxMetrics
from streams.settings import Settings

# The logger name it had under streams/outbox/, kept for log filters and dashboards.
log = logging.getLogger("streams.outbox.retention")


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    retention: timedelta = timedelta(hours=24)
    """Published rows are kept this long (for audits and re-drives), then deleted."""
    chunk_size: int = 5_000
    """Rows per DELETE: each chunk is its own short transaction."""
    max_chunks: int = 100
    """Bound on one run; what is left waits for the next run (``RetentionResult.more``)."""

    def __post_init__(self) -> None:
        if self.retention < timedelta(0):
            raise ValueError("RetentionConfig.retention must not be negative")
        if self.chunk_size < 1:
            raise ValueError("RetentionConfig.chunk_size must be >= 1")
        if self.max_chunks < 1:
            raise ValueError("RetentionConfig.max_chunks must be >= 1")

    @classmethod
    def from_settings(cls, settings: Settings) -> RetentionConfig:
        return cls(retention=timedelta(hours=settings.outbox_retention_hours))


@dataclass(frozen=True, slots=True)
class RetentionResult:
    cutoff: datetime
    """Rows published before this instant were eligible."""
    deleted: int
    chunks: int
    more: bool
    """The run stopped at ``max_chunks`` with eligible rows possibly left."""


class OutboxRetention:
    """A timer job: ``run_once(as_of)`` deletes rows published before ``as_of - retention``."""

    def __init__(
        self, pool: Any, *, metrics: OutboxMetrics, config: RetentionConfig | None = None
    ) -> None:
        self.config = config or RetentionConfig()
        self._pool = pool
        self._metrics = metrics

    async def run_once(self, as_of: datetime) -> RetentionResult:
        if as_of.tzinfo is None:
            raise ValueError("as_of must be timezone-aware")
        cutoff = as_of - self.config.retention
        deleted = chunks = 0
        more = False
        while True:
            async with connection(self._pool) as conn:
                n = await repo.published_delete(conn, cutoff, self.config.chunk_size)
            chunks += 1
            deleted += n
            self._metrics.deleted.inc(n)
            if n < self.config.chunk_size:
                break
            if chunks >= self.config.max_chunks:
                more = True
                break
        log.info(
            "action=outbox_retention cutoff=%s deleted=%d chunks=%d more=%s",
            cutoff.isoformat(),
            deleted,
            chunks,
            more,
        )
        return RetentionResult(cutoff=cutoff, deleted=deleted, chunks=chunks, more=more)
