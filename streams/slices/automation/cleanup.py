"""Stale cleanup (a registry job): Processing rows whose lease expired — their claimant
crashed, was killed or stalled past its lease — go back on the backoff ladder
(Pending, RetryCount + 1, NextRetryOn 5 min → 15 min → 1 h) or on support hold."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from db import automation as repo
from db.automation import RetryWrite
from db.connector import transaction
from streams.domain.automation import DEFAULT_BACKOFF, retry_plan
from streams.runtime import Runtime
from streams.slices.automation.handlers import LEASE_EXPIRED, HandlerRegistry
from streams.slices.automation.metrics import AutomationMetrics

log = logging.getLogger("streams.slices.automation.cleanup")


@dataclass(frozen=True)
class CleanupConfig:
    batch_size: int = 500
    backoff: tuple[timedelta, ...] = DEFAULT_BACKOFF


@dataclass
class CleanupResult:
    run_id: str
    rescued: int = 0
    held: int = 0
    batches: int = 0
    next_retry: datetime | None = None

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        out["next_retry"] = self.next_retry.isoformat() if self.next_retry else None
        return out


class StaleCleanup:
    """``run_once(as_of)``: rescue every expired lease, a batch per transaction. Rows are
    locked SKIP LOCKED and written under their current Version, so any number of workers
    may run it at once, and the rescued claimant's late write is fenced."""

    def __init__(
        self,
        runtime: Runtime,
        handlers: HandlerRegistry,
        config: CleanupConfig | None = None,
        *,
        metrics: AutomationMetrics | None = None,
        on_retry_due: Callable[[datetime], None] | None = None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self.runtime = runtime
        self.handlers = handlers
        self.config = config or CleanupConfig()
        self.metrics = metrics or runtime.metrics.family(AutomationMetrics)
        self.on_retry_due = on_retry_due
        self.should_stop = should_stop

    async def run_once(self, as_of: datetime) -> CleanupResult:
        result = CleanupResult(run_id=uuid.uuid4().hex[:12])
        now = max(as_of, self.runtime.clock.now())
        pool = await self.runtime.pool()
        while not self.should_stop():
            async with transaction(pool) as conn:
                stale = await repo.stale_lock(conn, now, self.config.batch_size)
                writes = []
                for row in stale:
                    handler = self.handlers.get(row.automation_type)
                    step = retry_plan(
                        row.retry_count,
                        now,
                        self.config.backoff,
                        daily_retry=bool(handler is not None and handler.daily_retry),
                    )
                    writes.append(
                        RetryWrite(
                            row.scheduler_id,
                            row.token,
                            step.status.value,
                            step.retry_count,
                            step.next_retry_on,
                            step.hold,
                            LEASE_EXPIRED,
                            "processing lease expired before the claim finished",
                        )
                    )
                written = await repo.rows_retry(conn, writes, now)
            result.batches += 1
            for w in writes:
                if w.scheduler_id not in written:
                    continue
                result.rescued += 1
                result.held += w.hold
                if w.next_retry_on is not None:
                    result.next_retry = min(result.next_retry or w.next_retry_on, w.next_retry_on)
                log.warning(
                    "action=automation_lease_expired run_id=%s scheduler_id=%d retry_count=%d "
                    "hold=%s",
                    result.run_id,
                    w.scheduler_id,
                    w.retry_count,
                    w.hold,
                )
            self.metrics.stale_rescued.inc(len(written))
            if len(stale) < self.config.batch_size:
                break
        if result.next_retry is not None and self.on_retry_due is not None:
            self.on_retry_due(result.next_retry)
        return result
