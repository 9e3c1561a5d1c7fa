"""DocumentExpiryReminderJob (seed 001), the run: a read-only scan of the documents in the
window, one work item per owner, the owners' progress awaited, then prune and backlog."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

from db import document_expiry_reminders as marks_repo
from db import document_expiry_runs as runs_repo
from db import person_documents as documents_repo
from db.document_expiry_runs import RunRow
from streams import faults, logs
from streams.clock import Clock
from streams.domain.profile import (
    DEFAULT_THRESHOLDS,
    RETENTION_DAYS,
    normalize_thresholds,
    prune_before,
    scan_window,
    utc_date,
)
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.profile.metrics import DocumentExpiryMetrics
from streams.slices.profile.settings import DocumentExpirySettings
from streams.slices.profile.work import Fanout, RunOrder
from streams.timers import HandBack
from streams.timers.context import RunContext
from streams.timers.cycle_log import CycleLog
from streams.timers.drain import drain

log = logging.getLogger("streams.slices.profile.run")

NIL = UUID(int=0)
PRUNE_BATCH = 10_000


@dataclass(frozen=True)
class ExpiryConfig:
    """DocumentExpiryReminderOptions: defaults from the seed; validated at construction.

    The run's one budget is its schedule's max duration (possibly overridden by
    ``TIMER_DOCUMENT_EXPIRY_MAX_DURATION_SECONDS``), given in the run context: the scan
    stops handing out owners and the wait for them ends in time for prune and backlog
    before the registry would cancel.
    """

    name: str = "document-expiry"
    thresholds: tuple[int, ...] = DEFAULT_THRESHOLDS
    batch_size: int = 500
    # Part of the budget kept for prune and backlog at the end.
    reserve: float = 0.1
    poll_seconds: float = 0.1

    def __post_init__(self) -> None:
        if normalize_thresholds(self.thresholds) != self.thresholds:
            raise ValueError("thresholds must be distinct and descending (normalize_thresholds)")
        if not 0 < self.batch_size <= 10_000:
            raise ValueError(f"batch_size must be in 1..10000, got {self.batch_size}")

    @classmethod
    def from_settings(cls, core: Settings, **overrides: Any) -> ExpiryConfig:
        settings = core.of(DocumentExpirySettings)
        return cls(
            thresholds=settings.thresholds,
            batch_size=settings.timer_document_expiry_batch_size,
            **overrides,
        )


@dataclass
class ExpiryRunResult:
    """What one run did (the seed's RemindersSentCount, OwnersNotifiedCount,
    SkippedAlreadyMarkedCount, PrunedCount, DurationMs, and how it got there)."""

    run_id: str
    as_of: datetime
    as_of_date: date
    thresholds: tuple[int, ...]
    reminders_sent: int = 0
    owners_notified: int = 0
    skipped_already_marked: int = 0
    pruned: int = 0
    duration_ms: float = 0.0
    documents_scanned: int = 0
    batches: int = 0
    owners_total: int = 0
    owners_done: int = 0
    owners_failed: int = 0
    backlog: int | None = None
    # The scan stopped with documents left because the budget ran out, or the worker stops.
    budget_exhausted: bool = False
    stopped: bool = False

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        out["as_of"] = self.as_of.isoformat()
        out["as_of_date"] = self.as_of_date.isoformat()
        out["thresholds"] = list(self.thresholds)
        return out

    def absorb(self, row: RunRow) -> None:
        self.owners_done = row.owners_done
        self.owners_failed = row.owners_failed
        self.owners_notified = row.owners_notified
        self.reminders_sent = row.reminders_sent
        self.skipped_already_marked = row.skipped_already_marked


class DocumentExpiryRun:
    """A timer handler: ``run_once(ctx)`` is one cycle of the seed's algorithm.

    Registered cluster-once, so one worker runs each daily slot; it hands every owner with
    a document in the window to the per-owner worker (``fanout``) and waits for them on the
    run's row in ``profile.document_expiry_runs``. Documents are read, never written.
    """

    def __init__(
        self,
        runtime: Runtime,
        fanout: Fanout,
        config: ExpiryConfig | None = None,
        *,
        metrics: DocumentExpiryMetrics | None = None,
    ) -> None:
        self.runtime = runtime
        self.fanout = fanout
        self.config = config or ExpiryConfig()
        self.metrics = metrics or runtime.metrics.family(DocumentExpiryMetrics)
        self.clock: Clock = runtime.clock
        self.last: ExpiryRunResult | None = None
        # cycle_started / cycle_completed of every run (streams/timers/cycle_log.py).
        self.cycles = CycleLog(log, self.clock)

    async def run_once(self, ctx: RunContext) -> ExpiryRunResult:
        cfg = self.config
        as_of = ctx.as_of
        today = utc_date(as_of)
        result = ExpiryRunResult(ctx.run_id, as_of, today, cfg.thresholds)
        started = self.clock.monotonic()
        cycle = self.cycles.start(
            result.run_id,
            as_of=as_of,
            as_of_date=today.isoformat(),
            thresholds=",".join(map(str, cfg.thresholds)),
            batch_size=cfg.batch_size,
        )
        pool = await self.runtime.pool()
        try:
            await runs_repo.start(
                pool, result.run_id, as_of, today, cfg.thresholds, self.clock.now()
            )
            # Before the scan: documents written by older transactions are read by it as
            # they are now (the backlog after a clean run needs to look at no other).
            horizon = await documents_repo.write_horizon(pool)
            await self._scan(result, ctx)
            await runs_repo.total_set(pool, result.run_id, result.owners_total)
            row = await self._wait(result, ctx)
            if result.stopped:
                # The worker stops with owners not handed out or not done: give the slot
                # back so another worker runs it (the marks keep what was sent sent).
                raise HandBack
            if row is not None:
                result.absorb(row)
            result.pruned = await self._prune(today)
            result.backlog = await self._backlog(result, horizon)
        except HandBack as exc:
            cycle.failed(exc, self._counts(result), outcome="handed_back")
            raise
        except BaseException as exc:
            if isinstance(exc, Exception):
                self.metrics.errors.inc()
            result.duration_ms = round((self.clock.monotonic() - started) * 1000, 3)
            cycle.failed(exc, self._counts(result))
            raise
        finally:
            result.duration_ms = round((self.clock.monotonic() - started) * 1000, 3)
            self.metrics.cycle_duration.observe(result.duration_ms / 1000)
        await runs_repo.finish(
            pool, result.run_id, result.pruned, result.backlog, self.clock.now(), result.duration_ms
        )
        self.metrics.backlog.set(result.backlog)
        self.last = result
        worked = bool(result.owners_total or result.pruned or result.owners_failed)
        cycle.completed(self._counts(result), worked=worked)
        return result

    @staticmethod
    def _counts(result: ExpiryRunResult) -> dict[str, object]:
        """The counts of seed 001's "cycle completed" line (zeros included)."""
        return {
            "reminders_sent": result.reminders_sent,
            "owners_notified": result.owners_notified,
            "skipped_already_marked": result.skipped_already_marked,
            "pruned": result.pruned,
            "duration_ms": result.duration_ms,
            "owners": result.owners_total,
            "owners_done": result.owners_done,
            "owners_failed": result.owners_failed,
            "documents": result.documents_scanned,
            "backlog": result.backlog,
            "budget_exhausted": result.budget_exhausted,
            "stopped": result.stopped,
        }

    async def _scan(self, result: ExpiryRunResult, ctx: RunContext) -> None:
        """Documents in the window, ExpiresAt ascending, BatchSize at a time while batches are
        full; each owner is handed out once, the first time one of its documents shows up.
        Between batches it stops for a shutdown, or once the budget (less the reserve for
        prune and backlog) is spent."""
        cfg = self.config
        window = scan_window(result.as_of_date, cfg.thresholds)
        pool = await self.runtime.pool()
        emitted: set[UUID] = set()
        order = RunOrder(cfg.name, result.run_id, result.as_of, result.thresholds)
        after = (window.lo - timedelta(days=1), NIL)

        async def batch() -> int:
            nonlocal after
            page = await documents_repo.scan(pool, window.lo, window.hi, after, cfg.batch_size)
            result.batches += 1
            result.documents_scanned += page.documents
            new = [owner for owner in page.owners if owner not in emitted]
            emitted.update(new)
            logs.event(
                log,
                logging.INFO,
                "batch_selected",
                run_id=result.run_id,
                count=page.documents,
                owners=len(new),
            )
            if new:
                faults.hit("expiry_run.fanout")
                await self.fanout.send(order, new)
            result.owners_total = len(emitted)
            if page.last is None:
                return 0
            after = page.last
            return page.documents

        await self.fanout.start()
        try:
            done = await drain(
                ctx,
                batch,
                clock=self.clock,
                batch_size=cfg.batch_size,
                reserve=cfg.reserve,
                lookahead=False,
            )
        finally:
            await self.fanout.close()
        if done.stopped_with_backlog:
            result.stopped = True
        elif done.budget_exhausted:
            result.budget_exhausted = True
            logs.event(
                log,
                logging.WARNING,
                "cycle_budget_exhausted",
                run_id=result.run_id,
                owners=len(emitted),
                documents=result.documents_scanned,
            )

    async def _wait(self, result: ExpiryRunResult, ctx: RunContext) -> RunRow | None:
        """The run's row once every owner handed out is done (or the budget is spent)."""
        pool = await self.runtime.pool()
        deadline = ctx.cutoff(self.config.reserve)
        while True:
            row = await runs_repo.get(pool, result.run_id)
            done = row is not None and row.owners_done >= result.owners_total
            if done or not self.fanout.waits:
                return row
            if ctx.should_stop() or self.clock.monotonic() >= deadline:
                result.stopped = result.stopped or ctx.should_stop()
                logs.event(
                    log,
                    logging.WARNING,
                    "cycle_owners_pending",
                    run_id=result.run_id,
                    owners=result.owners_total,
                    owners_done=row.owners_done if row is not None else 0,
                )
                return row
            await asyncio.sleep(self.config.poll_seconds)

    async def _backlog(self, result: ExpiryRunResult, horizon: str) -> int:
        """Active documents in the window with a crossed threshold that has no marker (the
        seed's backlog gauge), counted by the ledger after the run.

        After a clean run (the scan went to the end, every owner it handed out is done and
        none failed) only a document written since the scan began can owe a reminder: any
        other was read by the scan as it is now, so its owner's claim marked every crossed
        threshold. The count then checks those documents alone, instead of every document
        of the window against the ledger again (seconds at a million). Otherwise it checks
        them all."""
        cfg = self.config
        pool = await self.runtime.pool()
        window = scan_window(result.as_of_date, cfg.thresholds)
        clean = (
            not (result.budget_exhausted or result.stopped)
            and result.owners_failed == 0
            and result.owners_done >= result.owners_total
        )
        return await marks_repo.backlog_count(
            pool,
            window.lo,
            window.hi,
            result.as_of_date,
            cfg.thresholds,
            horizon if clean else None,
        )

    async def _prune(self, today: date) -> int:
        """Markers of documents expired before AsOf.Date - 90 days, in transactions of their
        own (batches of PRUNE_BATCH), and run rows as old."""
        pool = await self.runtime.pool()
        before = prune_before(today)
        pruned = 0
        while True:
            n = await marks_repo.prune(pool, before, PRUNE_BATCH)
            pruned += n
            if n < PRUNE_BATCH:
                break
        horizon = datetime.combine(today, datetime.min.time(), UTC)
        await runs_repo.prune(pool, horizon - timedelta(days=RETENTION_DAYS))
        return pruned
