"""Execution of the automation scheduler (seed 003): claim due rows (lease + new Version),
revalidate them through the handler of their AutomationType, and finish each one under its
token — Completed with a DispatchRequested in the outbox, Deactivated with a ReasonCode, or
back on the backoff ladder (what each outcome writes: batch_plan.py) — in one transaction
per batch. A write whose token no longer matches is fenced. A batch that gets no verdict (a
transient database error, a cancelled run) is handed back as interrupted, not failed: the
database's fault costs the rows no attempt."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from db import scheduler as repo
from db.connector import Connection, Pool, classify, connection, is_transient, transaction
from db.scheduler import ClaimedRow, RetryWrite
from streams import logs
from streams.clock import Clock
from streams.domain.automation.rules import (
    DEFAULT_BACKOFF,
    DEFAULT_INTERRUPTION_ALLOWANCE,
    DEFAULT_INTERRUPTION_DELAY,
    SchedulerStatus,
)
from streams.outbox.records import row_of
from streams.runtime import Runtime
from streams.slices.automation.batch_plan import plan_batch
from streams.slices.automation.handlers import (
    HANDLER_ERROR,
    INTERRUPTED,
    NO_HANDLER,
    Failure,
    HandlerRegistry,
    Outcome,
)
from streams.slices.automation.interruptions import interruption_write
from streams.slices.automation.metrics import AutomationMetrics
from streams.timers.context import RunContext
from streams.timers.drain import drain

log = logging.getLogger("streams.slices.automation.runner")


@dataclass(frozen=True)
class RunnerConfig:
    """The run's budget is its schedule's max duration (the run context's deadline): no batch
    starts that could not finish inside it. A batch interrupted by a transient database error
    or a cancellation is handed back (``interruption_plan``) on a fresh connection within
    ``hand_back_timeout``; a cancellation first gives the batch in flight ``finish_timeout``
    to end, since it may be committing. Once a batch comes back full (a backlog), up to ``lanes`` batches
    run side by side (claims are committed leases, so lanes never share a row), and one
    batch's Python overlaps another's database work."""

    batch_size: int = 200
    lanes: int = 2
    lease: timedelta = timedelta(seconds=120)
    backoff: tuple[timedelta, ...] = DEFAULT_BACKOFF
    reserve: float = 0.1
    interruption_allowance: int = DEFAULT_INTERRUPTION_ALLOWANCE
    interruption_delay: timedelta = DEFAULT_INTERRUPTION_DELAY
    hand_back_timeout: timedelta = timedelta(seconds=5)
    # How long a cancelled run waits for the batch in flight to commit or roll back.
    finish_timeout: timedelta = timedelta(seconds=2)

    def __post_init__(self) -> None:
        if not 0 < self.batch_size <= 10_000:
            raise ValueError(f"batch_size must be in 1..10000, got {self.batch_size}")
        if not 1 <= self.lanes <= 8:
            raise ValueError(f"lanes must be in 1..8, got {self.lanes}")
        if self.lease <= timedelta(0):
            raise ValueError("lease must be positive")


@dataclass
class RunResult:
    run_id: str
    claimed: int = 0
    completed: int = 0
    deactivated: dict[str, int] = field(default_factory=dict)
    failed: int = 0
    held: int = 0
    fenced: int = 0
    handed_back: int = 0
    batches: int = 0
    duration_ms: float = 0.0
    due_backlog: int = 0
    oldest_due_age_seconds: float = 0.0
    on_hold: int = 0
    next_due: datetime | None = None
    budget_exhausted: bool = False

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        out["next_due"] = self.next_due.isoformat() if self.next_due else None
        return out


class AutomationRunner:
    """A timer handler: ``run_once(ctx)`` drains due rows in batches of ``batch_size``."""

    def __init__(
        self,
        runtime: Runtime,
        handlers: HandlerRegistry,
        config: RunnerConfig | None = None,
        *,
        metrics: AutomationMetrics | None = None,
        on_next_due: Callable[[datetime], None] | None = None,
    ) -> None:
        self.runtime = runtime
        self.handlers = handlers
        self.config = config or RunnerConfig()
        self.metrics = metrics or runtime.metrics.family(AutomationMetrics)
        self.clock: Clock = runtime.clock
        self.on_next_due = on_next_due
        self.topic_prefix = runtime.settings.topic_prefix

    def _now(self, as_of: datetime) -> datetime:
        # A run's as_of may be its slot time, slightly in the past: leases count from now.
        return max(as_of, self.clock.now())

    async def run_once(self, ctx: RunContext) -> RunResult:
        as_of = ctx.as_of
        result = RunResult(run_id=ctx.run_id)
        started = self.clock.monotonic()
        pool = await self.runtime.pool()

        async def batch() -> int:
            rows = await self.claim(pool, self._now(as_of))
            if rows:
                await self._execute_or_hand_back(pool, rows, self._now(as_of), result)
            return len(rows)

        try:
            done = await drain(
                ctx,
                batch,
                clock=self.clock,
                batch_size=self.config.batch_size,
                reserve=self.config.reserve,
                lanes=self.config.lanes,
                stop_first=True,
            )
            result.budget_exhausted = done.budget_exhausted
            await self._observe(pool, self._now(as_of), result)
        finally:
            result.duration_ms = round((self.clock.monotonic() - started) * 1000, 3)
        if result.claimed:
            logs.event(
                log,
                logging.INFO,
                "automation_run_completed",
                run_id=result.run_id,
                claimed=result.claimed,
                completed=result.completed,
                deactivated=sum(result.deactivated.values()),
                failed=result.failed,
                held=result.held,
                fenced=result.fenced,
                handed_back=result.handed_back,
                batches=result.batches,
                duration_ms=result.duration_ms,
                backlog=result.due_backlog,
            )
        return result

    async def claim(self, pool: Pool, now: datetime) -> list[ClaimedRow]:
        """One claim transaction: due rows → Processing, lease now + N, new Version (token)."""
        began = self.clock.monotonic()
        async with transaction(pool) as conn:
            rows = await repo.claim(
                conn, now, self.config.batch_size, self.config.lease.total_seconds()
            )
        self.metrics.claim_duration.observe(self.clock.monotonic() - began)
        self.metrics.claimed.inc(len(rows))
        return rows

    async def _execute_or_hand_back(
        self, pool: Pool, rows: list[ClaimedRow], now: datetime, result: RunResult
    ) -> None:
        """``execute``; when the batch gets no verdict because the database failed (a
        transient error) or the run was cancelled (stop, max duration), its rows are handed
        back before the error goes on: the execution transaction rolled back, so nothing of
        the batch was written, and an interruption is not the rows' failure."""
        execution = asyncio.ensure_future(self.execute(pool, rows, now, result))
        # Left behind by a second cancellation, its outcome is still retrieved (and dropped).
        execution.add_done_callback(lambda t: t.cancelled() or t.exception())
        try:
            await asyncio.shield(execution)
        except asyncio.CancelledError:
            # Cancelled (a stop, the max duration) while the batch's transaction may be
            # committing: a cancellation landing on the COMMIT would leave rows Completed and
            # on the topic but uncounted. The batch gets a moment to end, so its outcome is
            # known; one that does not end in time is cancelled (rolled back) and handed back.
            if not execution.done():
                await asyncio.wait({execution}, timeout=self.config.finish_timeout.total_seconds())
            if not execution.done():
                execution.cancel()
                await asyncio.gather(execution, return_exceptions=True)
            failed = execution.cancelled() or execution.exception() is not None
            if failed:
                await self.hand_back(pool, rows, now, "Cancelled", result)
            raise
        except Exception as exc:
            if is_transient(exc):
                await self.hand_back(pool, rows, now, type(exc).__name__, result)
            raise

    async def hand_back(
        self, pool: Pool, rows: list[ClaimedRow], now: datetime, cause: str, result: RunResult
    ) -> int:
        """Put ``rows`` back as interrupted, in one statement on a fresh connection, bounded by
        ``hand_back_timeout`` and shielded from a second cancellation. Rows it cannot write
        (the database is still away) keep their lease: stale cleanup counts the same
        interruption when it expires. Returns the rows handed back."""
        now = max(now, self.clock.now())
        writes = [self.interruption_write(row, cause, now) for row in rows]
        write = asyncio.ensure_future(self._write_back(pool, writes, now))
        # Abandoned by a second cancellation, its outcome is still retrieved (and dropped):
        # what it could not write, stale cleanup puts back.
        write.add_done_callback(lambda t: t.cancelled() or t.exception())
        try:
            written = await asyncio.wait_for(
                asyncio.shield(write), self.config.hand_back_timeout.total_seconds()
            )
        except asyncio.CancelledError:
            raise  # the shielded write goes on; its result is not waited for
        except Exception as exc:
            write.cancel()
            self.metrics.hand_back_failed.inc(len(rows))
            logs.event(
                log,
                logging.WARNING,
                "automation_hand_back_failed",
                run_id=result.run_id,
                rows=len(rows),
                cause=cause,
                error=type(exc).__name__,
            )
            return 0
        charged = 0
        for w in writes:
            if w.scheduler_id not in written:
                continue  # fenced: the batch had committed, or the row moved on
            label = "true" if w.reason is not None else "false"
            self.metrics.interrupted.labels("hand_back", label).inc()
            charged += w.reason is not None
            result.held += w.hold
        result.handed_back += len(written)
        logs.event(
            log,
            logging.WARNING,
            "automation_batch_handed_back",
            run_id=result.run_id,
            rows=len(rows),
            handed_back=len(written),
            charged=charged,
            cause=cause,
        )
        if written and self.on_next_due is not None:
            due = [w.next_retry_on for w in writes if w.next_retry_on is not None]
            if due:
                self.on_next_due(min(due))
        return len(written)

    async def _write_back(self, pool: Pool, writes: list[RetryWrite], now: datetime) -> set[int]:
        async with transaction(pool) as conn:
            return await repo.retry(conn, writes, now)

    def interruption_write(self, row: ClaimedRow, cause: str, now: datetime) -> RetryWrite:
        """The write of a claim that ended without a verdict: RetryCount kept within the
        allowance, an attempt (reason Interrupted) once it is spent."""
        return interruption_write(
            row, now, self.config, self.handlers, reason=INTERRUPTED, error=cause
        )

    async def execute(
        self, pool: Pool, rows: list[ClaimedRow], now: datetime, result: RunResult
    ) -> None:
        """Revalidate and finish ``rows`` in one transaction; every write presents the token."""
        began = self.clock.monotonic()
        # Written in key order, the order Ensure and Deactivate lock rows in.
        rows = sorted(rows, key=lambda r: r.scheduler_key)
        by_id = {r.scheduler_id: r for r in rows}
        async with transaction(pool) as conn:
            outcomes = await self._revalidate(conn, rows)
            plan = plan_batch(
                rows,
                outcomes,
                now,
                result.run_id,
                topic_prefix=self.topic_prefix,
                backoff=self.config.backoff,
                handlers=self.handlers,
            )
            rows_of = {i: row_of(record) for i, record in plan.records.items()}
            done = await repo.complete_dispatch(conn, plan.completions, rows_of, now)
            retired = await repo.retire(conn, plan.retires, now)
            retried = await repo.retry(conn, plan.retries, now)
        self.metrics.execution_duration.observe(self.clock.monotonic() - began)
        # Counted only once the transaction has committed.
        result.batches += 1
        result.claimed += len(rows)
        m = self.metrics
        m.outcomes.labels("completed", "").inc(len(done))
        result.completed += len(done)
        for i in done:
            m.lateness.observe(max(0.0, (now - by_id[i].due_on).total_seconds()))
        for i, _, reason in plan.retires:
            if i in retired:
                m.outcomes.labels("deactivated", reason).inc()
                result.deactivated[reason] = result.deactivated.get(reason, 0) + 1
        for w in plan.retries:
            if w.scheduler_id in retried:
                # A hold verdict keeps its status Pending; a failed attempt moves the ladder
                # (and is held as Failed once the ladder is exhausted).
                failed = not (w.hold and w.status == SchedulerStatus.PENDING.value)
                m.outcomes.labels("failed" if failed else "held", w.reason or "").inc()
                result.failed += failed
                result.held += w.hold
        result.fenced += self._fenced(by_id, [c[0] for c in plan.completions], done, "Completed")
        result.fenced += self._fenced(by_id, [r[0] for r in plan.retires], retired, "Deactivated")
        result.fenced += self._fenced(
            by_id, [w.scheduler_id for w in plan.retries], retried, "Retry"
        )

    async def _revalidate(self, conn: Connection, rows: list[ClaimedRow]) -> dict[int, Outcome]:
        by_type: dict[str, list[ClaimedRow]] = {}
        for row in rows:
            by_type.setdefault(row.automation_type, []).append(row)
        outcomes: dict[int, Outcome] = {}
        for kind, group in by_type.items():
            handler = self.handlers.get(kind)
            if handler is None:
                outcomes.update({r.scheduler_id: Failure(NO_HANDLER) for r in group})
                continue
            try:
                found: Mapping[int, Outcome] = await handler.revalidate(conn, group)
            except Exception as exc:
                if classify(exc) is not None:
                    raise  # the database is unwell: the batch rolls back and is handed back
                logs.event(
                    log,
                    logging.ERROR,
                    "automation_handler_failed",
                    automation_type=kind,
                    rows=len(group),
                    error=type(exc).__name__,
                )
                found = {r.scheduler_id: Failure(HANDLER_ERROR, type(exc).__name__) for r in group}
            for r in group:
                outcomes[r.scheduler_id] = found.get(
                    r.scheduler_id, Failure(HANDLER_ERROR, "no verdict")
                )
        return outcomes

    def _fenced(
        self,
        by_id: Mapping[int, ClaimedRow],
        wanted: Iterable[int],
        written: set[int],
        transition: str,
    ) -> int:
        fenced = [i for i in wanted if i not in written]
        for i in fenced:
            row = by_id[i]
            logs.event(
                log,
                logging.WARNING,
                "automation_write_fenced",
                scheduler_id=row.scheduler_id,
                token=row.token,
                transition=transition,
            )
        if fenced:
            self.metrics.fenced.labels(transition).inc(len(fenced))
        return len(fenced)

    async def _observe(self, pool: Pool, now: datetime, result: RunResult) -> None:
        async with connection(pool) as conn:
            stats = await repo.backlog_stats(conn, now)
        result.due_backlog = stats.due_backlog
        result.on_hold = stats.on_hold
        earliest = stats.earliest_due_on
        if earliest is not None and earliest <= now:
            result.oldest_due_age_seconds = (now - earliest).total_seconds()
        self.metrics.due_backlog.set(stats.due_backlog)
        self.metrics.oldest_due_age.set(result.oldest_due_age_seconds)
        self.metrics.on_hold.set(stats.on_hold)
        if earliest is not None and earliest > now:
            result.next_due = earliest
        elif earliest is not None and result.budget_exhausted:
            result.next_due = now  # more is due: run again right away
        if result.next_due is not None and self.on_next_due is not None:
            self.on_next_due(result.next_due)
