"""ReminderDispatchJob (seed 000): due Pending reminders → Sent + ReminderDueEvent in the outbox, or Skipped."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from db import event_reminders as repo
from db.connector import Pool, connection, transaction
from db.event_reminders import ClaimedReminder, DueState
from streams import logs, tracing
from streams.clock import Clock
from streams.contracts import REMINDER_DUE
from streams.contracts.calendar import EventStatus, ReminderDueEvent
from streams.domain.calendar import dispatch_skip_reason
from streams.outbox.records import OutboxRecord, RecordMaker, columns
from streams.runtime import Runtime
from streams.slices.calendar.metrics import CalendarDispatchMetrics
from streams.timers.context import RunContext
from streams.timers.cycle_log import CycleLog
from streams.timers.drain import drain

log = logging.getLogger("streams.slices.calendar.dispatch")
# The seed's per-item lines (batch selected, reminder sent, reminder skipped): DEBUG, so an
# operator turns them on with LOG_LEVEL=debug; their cost is in docs/benchmarks.md.
ITEM_LEVEL = logging.DEBUG


@dataclass(frozen=True)
class DispatchConfig:
    """ReminderDispatchOptions: defaults from the seed; validated at construction.

    The run's one budget is its schedule's max duration
    (``TIMER_CALENDAR_DISPATCH_MAX_DURATION_SECONDS``), given in the run context: the
    dispatcher starts no batch it could not finish inside it, so the registry's timeout
    never cuts a batch.
    """

    batch_size: int = 200
    # Batches in flight at once while there is a backlog (each its own transaction).
    lanes: int = 2
    # Part of the budget kept free at the end (besides the longest batch seen so far).
    reserve: float = 0.1
    # A poison row stays Pending (seed 000) and is tried again after this, doubling with
    # each failed attempt up to ``poison_backoff_max``: the first retry is the next cycle.
    poison_backoff: timedelta = timedelta(seconds=60)
    poison_backoff_max: timedelta = timedelta(hours=1)

    def __post_init__(self) -> None:
        if not 1 <= self.lanes <= 8:
            raise ValueError(f"lanes must be in 1..8, got {self.lanes}")
        if not 0 < self.batch_size <= 10_000:
            raise ValueError(f"batch_size must be in 1..10000, got {self.batch_size}")
        if not timedelta(seconds=1) <= self.poison_backoff <= self.poison_backoff_max:
            raise ValueError(
                "poison_backoff must be at least 1 s and at most poison_backoff_max, got "
                f"{self.poison_backoff} / {self.poison_backoff_max}"
            )
        if self.poison_backoff_max > timedelta(days=1):
            raise ValueError(
                f"poison_backoff_max must be at most 1 day, got {self.poison_backoff_max}"
            )


@dataclass
class DispatchResult:
    """What one run did (the seed's SentCount, SkippedCount, SkippedLockedCount, DurationMs)."""

    run_id: str
    sent_count: int = 0
    skipped_count: int = 0
    skipped_locked_count: int = 0
    failed_count: int = 0
    batches: int = 0
    duration_ms: float = 0.0
    backlog: int = 0
    # Where the run asks to be woken next (never before AsOf unless it was cut short, by its
    # budget or a shutdown, with claimable rows left): the earliest DueAt or retry time
    # after AsOf.
    next_due: datetime | None = None
    poison: list[UUID] = field(default_factory=list)
    # True when the run stopped with due rows left because its time budget ran out.
    budget_exhausted: bool = False

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        out["next_due"] = self.next_due.isoformat() if self.next_due else None
        out["poison"] = [str(p) for p in self.poison]
        return out


def poison_retry_at(as_of: datetime, attempts: int, base: timedelta, cap: timedelta) -> datetime:
    """When a row that failed for the ``attempts + 1``-th time is tried again: ``base``
    doubled per earlier failed attempt, at most ``cap``."""
    delay: timedelta = base * (1 << min(max(attempts, 0), 20))
    return as_of + min(cap, delay)


def wake_after(as_of: datetime, state: DueState, cut_short: bool) -> datetime | None:
    """Where the dispatcher wakes after a run. Never into the past for rows it could not
    take: rows still claimable at AsOf are either beyond a run cut short with a full batch
    (its budget ran out, or a shutdown: wake now, the drain goes on) or held by another
    transaction (the next regular cycle takes them); otherwise the earliest time a row
    becomes claimable (a DueAt or a retry time)."""
    if cut_short and state.ready:
        return as_of
    return state.next_wake


def log_items(rows: list[ClaimedReminder], sent: set[UUID], skipped: set[UUID]) -> None:
    """The seed's per-item lines of one committed batch (identifiers only, no PII; a poison
    row has its own item_failed line); the run id and schedule come from the run's context
    (streams/logs.py)."""
    logs.event(log, ITEM_LEVEL, "batch_selected", count=len(rows))
    for row in rows:
        if row.reminder_id in skipped:
            logs.event(
                log,
                ITEM_LEVEL,
                "reminder_skipped",
                reminder_id=row.reminder_id,
                event_status=row.event_status,
            )
        elif row.reminder_id in sent:
            logs.event(
                log,
                ITEM_LEVEL,
                "reminder_sent",
                reminder_id=row.reminder_id,
                event_id=row.event_id,
                offset_minutes=row.offset_minutes,
                tenant_id=row.tenant_id,
            )


def build_event(row: ClaimedReminder) -> ReminderDueEvent:
    """The integration event of one claimed row (raises if the row cannot make one: poison)."""
    return ReminderDueEvent(
        reminder_id=row.reminder_id,
        event_id=row.event_id,
        tenant_id=row.tenant_id,
        owner_user_id=row.owner_user_id,
        client_user_id=row.client_user_id,
        kind=row.kind,
        start_at=row.start_at,
        time_zone=row.time_zone,
        offset_minutes=row.offset_minutes,
        appointment_id=row.appointment_id,
    )


def record_maker(run_id: str, topic_prefix: str) -> RecordMaker[ReminderDueEvent]:
    """The maker of a run's outbox records (each carries the run id as its correlation id)."""
    return RecordMaker(REMINDER_DUE, topic_prefix=topic_prefix, headers={"correlation-id": run_id})


def reminder_record(row: ClaimedReminder, make: RecordMaker[ReminderDueEvent]) -> OutboxRecord:
    """The row's outbox record (raises if the row cannot make one: poison). When its event
    keeps the input's trace context (tracing on at ingest and now), built in a short
    ``calendar.reminder.send`` span whose parent is that context and which links to the batch
    span current now, so the record's ``traceparent`` continues the input's trace; otherwise
    under the batch's span, with no span of its own (tracing off: no span per row)."""
    if row.source_traceparent is None or not tracing.enabled():
        return make(build_event(row))
    with tracing.continued(
        "calendar.reminder.send",
        row.source_traceparent,
        reminderId=row.reminder_id,
        eventId=row.event_id,
        offsetMinutes=row.offset_minutes,
        tenantId=row.tenant_id,
    ):
        return make(build_event(row))


# EventStatus text -> the reason a reminder of such an event is Skipped (None: sent), so a
# claimed row's status is looked up, not turned into the enum, once per row.
SKIP_REASONS: dict[str, str | None] = {s.value: dispatch_skip_reason(s) for s in EventStatus}


def skip_reason(event_status: str) -> str | None:
    """``dispatch_skip_reason`` of a claimed row's status (ValueError for an unknown one)."""
    try:
        return SKIP_REASONS[event_status]
    except KeyError:
        return dispatch_skip_reason(EventStatus(event_status))


class CalendarReminderDispatcher:
    """A timer handler: ``run_once(ctx)`` drains due reminders in batches of ``batch_size``.

    Each batch is one transaction: claim (SKIP LOCKED) → transitions → outbox rows. Once a
    batch comes back full (a backlog), a second runs beside it (``lanes``), claiming the
    next rows, so one batch's Python overlaps the other's database work. A row
    that cannot be turned into an event is left Pending and out of this run's later
    batches; an infrastructure error rolls the batch back and propagates (the registry
    logs and counts it; the rows are still Pending for the next run).
    """

    def __init__(
        self,
        runtime: Runtime,
        config: DispatchConfig | None = None,
        *,
        metrics: CalendarDispatchMetrics | None = None,
        on_next_due: Callable[[datetime], None] | None = None,
    ) -> None:
        self.runtime = runtime
        self.config = config or DispatchConfig()
        self.metrics = metrics or runtime.metrics.family(CalendarDispatchMetrics)
        self.clock: Clock = runtime.clock
        self.on_next_due = on_next_due
        self.topic_prefix = runtime.settings.topic_prefix
        # Rows the run's batches hold right now: another lane's claim leaves them out, so
        # they are not counted as passed over (they are this run's own work).
        self._inflight: set[UUID] = set()
        # One claim at a time across the lanes (the rest of a batch still overlaps): a claim
        # running beside another would pass over rows whose ids the run does not know yet.
        self._claiming = asyncio.Lock()
        # cycle_started / cycle_completed of every run (streams/timers/cycle_log.py).
        self.cycles = CycleLog(log, self.clock)

    async def run_once(self, ctx: RunContext) -> DispatchResult:
        as_of = ctx.as_of
        result = DispatchResult(run_id=ctx.run_id)
        started = self.clock.monotonic()
        # What the run's last claim saw, when that settles the state after the run.
        seen: DueState | None = None
        cycle = self.cycles.start(result.run_id, as_of=as_of)
        pool = await self.runtime.pool()

        async def batch() -> int:
            nonlocal seen
            with tracing.span("calendar.dispatch.batch", run_id=result.run_id) as span:
                claimed, seen = await self._batch(pool, as_of, result)
                tracing.annotate(span, **{"batch.size": claimed})
            return claimed

        try:
            # Once a batch comes back full (a backlog), another lane claims the next rows
            # (SKIP LOCKED) while this one writes, so Python's work on one overlaps
            # PostgreSQL's on the other. No batch starts that might not finish inside the
            # budget; a shutdown stops it between batches, not inside one.
            done = await drain(
                ctx,
                batch,
                clock=self.clock,
                batch_size=self.config.batch_size,
                reserve=self.config.reserve,
                lanes=self.config.lanes,
            )
            result.budget_exhausted = done.budget_exhausted
            due = seen if done.lanes == 1 else None
            if due is None:
                async with connection(pool) as conn:
                    due = await repo.due_state(conn, as_of)
            result.backlog = due.backlog
            result.next_due = wake_after(as_of, due, done.cut_short)
        except BaseException as exc:
            self.metrics.errors.inc()
            result.duration_ms = round((self.clock.monotonic() - started) * 1000, 3)
            cycle.failed(exc, self._counts(result))
            raise
        finally:
            result.duration_ms = round((self.clock.monotonic() - started) * 1000, 3)
            self.metrics.cycle_duration.observe(result.duration_ms / 1000)
        self.metrics.skip_locked.inc(result.skipped_locked_count)
        self.metrics.backlog.set(result.backlog)
        self.metrics.backing_off.set(due.backlog - due.ready)
        overdue = (as_of - due.oldest_due).total_seconds() if due.oldest_due else 0.0
        self.metrics.oldest_due_age.set(max(0.0, overdue))
        if result.next_due is not None and self.on_next_due is not None:
            self.on_next_due(result.next_due)
        worked = bool(result.sent_count or result.skipped_count or result.failed_count)
        cycle.completed(self._counts(result), worked=worked)
        return result

    @staticmethod
    def _counts(result: DispatchResult) -> dict[str, object]:
        """The counts of seed 000's "cycle completed" line (zeros included)."""
        return {
            "sent": result.sent_count,
            "skipped": result.skipped_count,
            "skipped_locked": result.skipped_locked_count,
            "failed": result.failed_count,
            "batches": result.batches,
            "duration_ms": result.duration_ms,
            "backlog": result.backlog,
        }

    async def _batch(
        self, pool: Pool, as_of: datetime, result: DispatchResult
    ) -> tuple[int, DueState | None]:
        """One claimed batch in one transaction. Returns how many rows were claimed and,
        when the claim took every claimable row there was (none locked elsewhere, none
        poison, room left in the batch), the state after it: only the rows backing off are
        due, the next wake-up is the claim's."""
        n = self.config.batch_size
        sent: list[tuple[UUID, str, str | None]] = []
        skipped: list[tuple[UUID, str, str | None]] = []
        records: list[OutboxRecord] = []
        lateness: list[float] = []
        poison: list[tuple[UUID, datetime, str]] = []
        cfg = self.config
        held: set[UUID] = set()
        make = record_maker(result.run_id, self.topic_prefix)
        try:
            async with transaction(pool) as conn:
                async with self._claiming:
                    claim = await repo.claim_due(conn, as_of, n, [*result.poison, *self._inflight])
                    rows = claim.rows
                    held = {row.reminder_id for row in rows}
                    self._inflight |= held
                for row in rows:
                    reason = skip_reason(row.event_status)
                    if reason is not None:
                        skipped.append((row.reminder_id, "Skipped", reason))
                        continue
                    try:
                        record = reminder_record(row, make)
                    except Exception as exc:  # poison: this row only; the batch goes on
                        retry_at = poison_retry_at(
                            as_of, row.attempts, cfg.poison_backoff, cfg.poison_backoff_max
                        )
                        poison.append((row.reminder_id, retry_at, type(exc).__name__))
                        # Left out of every later claim of this run at once (not after the
                        # commit): the other lane's next claim may come before this commits.
                        result.poison.append(row.reminder_id)
                        logs.event(
                            log,
                            logging.ERROR,
                            "item_failed",
                            run_id=result.run_id,
                            reminder_id=row.reminder_id,
                            event_id=row.event_id,
                            error=type(exc).__name__,
                            attempts=row.attempts + 1,
                            retry_at=retry_at.isoformat(),
                        )
                        continue
                    sent.append((row.reminder_id, "Sent", None))
                    records.append(record)
                    lateness.append((as_of - row.due_at).total_seconds())
                await repo.mark_dispatched(conn, sent + skipped, as_of, columns(records), poison)
        finally:
            self._inflight -= held  # committed or rolled back: no longer held
        # Counted (and logged) only once the transaction has committed.
        result.batches += 1
        if log.isEnabledFor(ITEM_LEVEL):
            log_items(rows, {s[0] for s in sent}, {s[0] for s in skipped})
        result.sent_count += len(sent)
        result.skipped_count += len(skipped)
        result.failed_count += len(poison)
        # From the rows the claim's scan went through, not capped at the batch size (a
        # full batch under contention passes over the most). Each claim of a run passes
        # over the same rows held elsewhere again: the run's count is the most any of its
        # claims passed over, not their sum.
        locked = claim.passed_over
        result.skipped_locked_count = max(result.skipped_locked_count, locked)
        m = self.metrics
        m.items.labels("sent").inc(len(sent))
        m.items.labels("skipped").inc(len(skipped))
        m.errors.inc(len(poison))
        for seconds in lateness:
            m.lateness.observe(seconds)
        whole = len(rows) < n and locked == 0 and not result.poison
        after = DueState(claim.waiting, 0, claim.waiting_oldest, claim.next_wake)
        return len(rows), after if whole else None
