"""Stale cleanup (a registry job): Processing rows whose lease expired — their claimant
crashed, was killed, stalled past its lease or could not hand them back — are interrupted
claims, not failed attempts: Pending again after a short delay, RetryCount unchanged, until
the row's interruption allowance is spent; then each expiry is an attempt on the backoff
ladder (RetryCount + 1, NextRetryOn 5 min → 15 min → 1 h) and ends on support hold."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from db import scheduler as repo
from db.connector import transaction
from streams import logs
from streams.domain.automation.rules import (
    DEFAULT_BACKOFF,
    DEFAULT_INTERRUPTION_ALLOWANCE,
    DEFAULT_INTERRUPTION_DELAY,
)
from streams.runtime import Runtime
from streams.slices.automation.handlers import LEASE_EXPIRED, HandlerRegistry
from streams.slices.automation.interruptions import interruption_write
from streams.slices.automation.metrics import AutomationMetrics
from streams.timers.context import RunContext
from streams.timers.drain import drain

log = logging.getLogger("streams.slices.automation.cleanup")


@dataclass(frozen=True)
class CleanupConfig:
    batch_size: int = 500
    backoff: tuple[timedelta, ...] = DEFAULT_BACKOFF
    interruption_allowance: int = DEFAULT_INTERRUPTION_ALLOWANCE
    interruption_delay: timedelta = DEFAULT_INTERRUPTION_DELAY


@dataclass
class CleanupResult:
    run_id: str
    rescued: int = 0
    charged: int = 0
    held: int = 0
    batches: int = 0
    next_retry: datetime | None = None

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        out["next_retry"] = self.next_retry.isoformat() if self.next_retry else None
        return out


class StaleCleanup:
    """``run_once(ctx)``: rescue every expired lease, a batch per transaction. Rows are
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
    ) -> None:
        self.runtime = runtime
        self.handlers = handlers
        self.config = config or CleanupConfig()
        self.metrics = metrics or runtime.metrics.family(AutomationMetrics)
        self.on_retry_due = on_retry_due

    async def run_once(self, ctx: RunContext) -> CleanupResult:
        result = CleanupResult(run_id=ctx.run_id)
        now = max(ctx.as_of, self.runtime.clock.now())
        pool = await self.runtime.pool()

        async def batch() -> int:
            async with transaction(pool) as conn:
                stale = await repo.lock_stale(conn, now, self.config.batch_size)
                writes = []
                for row in stale:
                    writes.append(
                        interruption_write(
                            row,
                            now,
                            self.config,
                            self.handlers,
                            reason=LEASE_EXPIRED,
                            error="processing lease expired before the claim finished",
                        )
                    )
                written = await repo.retry(conn, writes, now)
            result.batches += 1
            for w in writes:
                if w.scheduler_id not in written:
                    continue
                result.rescued += 1
                charged = w.reason is not None
                result.charged += charged
                result.held += w.hold
                self.metrics.interrupted.labels("lease_expired", str(charged).lower()).inc()
                if w.next_retry_on is not None:
                    result.next_retry = min(result.next_retry or w.next_retry_on, w.next_retry_on)
                logs.event(
                    log,
                    logging.WARNING,
                    "automation_lease_expired",
                    run_id=result.run_id,
                    scheduler_id=w.scheduler_id,
                    retry_count=w.retry_count,
                    interrupted_count=w.interrupted_count or 0,
                    charged=charged,
                    hold=w.hold,
                )
            self.metrics.stale_rescued.inc(len(written))
            return len(stale)

        # Every expired lease in one run: the registry's max duration is the only bound.
        await drain(
            ctx,
            batch,
            clock=self.runtime.clock,
            batch_size=self.config.batch_size,
            reserve=None,
            stop_first=True,
        )
        if result.next_retry is not None and self.on_retry_due is not None:
            self.on_retry_due(result.next_retry)
        return result
