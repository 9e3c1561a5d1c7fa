"""Executing one run of a schedule: claim, the handler under its max duration, outcome, finish."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from streams import logs, tracing
from streams.clock import Clock
from streams.errors import describe
from streams.timers.context import RunContext
from streams.timers.leases import ClaimResult, SlotLeases
from streams.timers.logfmt import event
from streams.timers.metrics import TimerMetrics
from streams.timers.pauses import PauseCheck
from streams.timers.ports import Sleeper
from streams.timers.retries import HandBack
from streams.timers.runs import RunRecord, summarize
from streams.timers.schedule import Mode, ResolvedSchedule
from streams.timers.state import ScheduleState

_ERROR_CHARS = 300


@dataclass(frozen=True)
class Outcome:
    # ok, failed, timeout or cancelled
    result: str
    value: object = None
    error: str | None = None
    # What ops.timer_slots keeps of a run that did not end ok: the exception class, or
    # timeout / cancelled (never the message: driver errors carry DETAIL text).
    error_class: str | None = None
    # The handler gave its slot back unfinished (HandBack): not an attempt.
    handed_back: bool = False


async def invoke(
    spec: ResolvedSchedule,
    ctx: RunContext,
    *,
    clock: Clock,
    sleeper: Sleeper,
    track: Callable[[asyncio.Task[object] | None], None],
) -> Outcome:
    """Run ``spec``'s handler with ``ctx``, cancelled at its max duration.

    ``track`` is told the handler's task while it runs (and None after), so shutdown can
    cancel it. Cancelling the caller cancels the handler too, and waits for it to unwind.
    """
    run_id = ctx.run_id
    # Every line the handler writes carries the run's id and schedule (streams/logs.py).
    task: asyncio.Task[object] = asyncio.create_task(
        _invoke(spec, ctx),
        name=f"timer:{spec.name}:{run_id}",
        context=logs.bind_run(run_id=run_id, schedule=spec.name),
    )
    track(task)
    deadline = asyncio.create_task(sleeper.sleep_until(clock.now() + spec.max_duration))
    try:
        await asyncio.wait({task, deadline}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        # The loop itself is being torn down: take the handler with it, then re-raise.
        task.cancel()
        await asyncio.wait({task})
        raise
    finally:
        deadline.cancel()
        await asyncio.gather(deadline, return_exceptions=True)
        track(None)
    if not task.done():
        task.cancel()
        # Wait for the cancellation to unwind so the handler's transaction rolls back.
        await asyncio.wait({task})
        event(
            logging.ERROR,
            "timer_run_timeout",
            schedule=spec.name,
            run_id=run_id,
            max_duration=spec.max_duration.total_seconds(),
        )
        return Outcome(
            "timeout",
            error=f"exceeded max duration {spec.max_duration.total_seconds():g}s",
            error_class="timeout",
        )
    if task.cancelled():
        return Outcome("cancelled", error="cancelled (shutdown)", error_class="cancelled")
    exc = task.exception()
    if isinstance(exc, HandBack):
        event(logging.INFO, "timer_run_handed_back", schedule=spec.name, run_id=run_id)
        return Outcome(
            "cancelled", error="handed back (stopping)", error_class="HandBack", handed_back=True
        )
    if exc is not None:
        event(logging.ERROR, "timer_run_failed", schedule=spec.name, run_id=run_id, exc_info=exc)
        return Outcome(
            "failed",
            error=describe(exc)[:_ERROR_CHARS],
            error_class=type(exc).__name__,
        )
    return Outcome("ok", task.result())


async def _invoke(spec: ResolvedSchedule, ctx: RunContext) -> object:
    # The run's span (streams/tracing): current for the handler's task, so its batches' spans
    # and the outbox records it writes belong to the run's trace.
    with tracing.span(
        f"timer.run {spec.name}",
        schedule=spec.name,
        slot=ctx.slot,
        run_id=ctx.run_id,
        correlationId=ctx.run_id,
        run_kind=ctx.kind,
    ) as span:
        value = await spec.handler.run_once(ctx)
        if span is not None:
            tracing.annotate(span, **run_counts(summarize(value)))
        return value


def run_counts(summary: object) -> dict[str, object]:
    """The numbers of a run's summary (its counts), as span attributes ``count.<name>``."""
    if not isinstance(summary, dict):
        return {}
    return {
        f"count.{k}": v
        for k, v in summary.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


class RunExecutor:
    """Runs one slot or wake-up of a schedule and keeps its statistics and metrics."""

    def __init__(
        self,
        *,
        clock: Clock,
        sleeper: Sleeper,
        metrics: TimerMetrics,
        leases: SlotLeases | None,
        stopping: Callable[[], bool] = lambda: False,
        turned: Callable[[str, float], None] = lambda name, within: None,
        finished: Callable[[RunRecord], None] = lambda record: None,
        pauses: PauseCheck | None = None,
    ) -> None:
        self._pauses = pauses
        self._stopping = stopping
        self._turned = turned
        self._finished = finished
        self._clock = clock
        self._sleeper = sleeper
        self._metrics = metrics
        self._leases = leases

    async def run(
        self,
        state: ScheduleState,
        slot: datetime | None,
        kind: str,
        *,
        as_of: datetime,
        ignore_pause: bool = False,
    ) -> RunRecord:
        """Claim (cluster-once) and run one slot or wake-up; tells ``finished`` the record of
        every run that ends (paused, deduped and failed claims too). ``ignore_pause``: an
        operator's explicit override of a cluster-wide pause (``timers run --ignore-pause``)."""
        record = await self._run(state, slot, kind, as_of=as_of, ignore_pause=ignore_pause)
        assert record is not None  # only a takeover can come back without a record
        self._finished(record)
        return record

    async def _run(
        self,
        state: ScheduleState,
        slot: datetime | None,
        kind: str,
        *,
        as_of: datetime,
        ignore_pause: bool = False,
        lease: datetime | None = None,
    ) -> RunRecord | None:
        """One run; ``lease``: take over ``slot``, whose lease ran out then (None when another
        worker was first or the store failed)."""
        spec = state.spec
        name = spec.name
        run_id = uuid.uuid4().hex
        once = slot is not None and spec.mode is Mode.CLUSTER_ONCE
        # The one gate of every path (scheduled, retried, handed back, taken over, manual,
        # backfilled): read before anything is claimed, so a held slot is left as it was and
        # runs after the resume.
        if self._pauses is not None and await self._pauses.paused(state):
            if not ignore_pause:
                state.stats.paused += 1
                self._metrics.paused_runs.labels(schedule=name).inc()
                event(
                    logging.INFO,
                    "timer_run_paused",
                    schedule=name,
                    run_id=run_id,
                    kind=kind,
                    slot=slot,
                )
                return RunRecord(name, run_id, kind, slot, as_of, "paused")
            event(
                logging.WARNING,
                "timer_run_despite_pause",
                schedule=name,
                run_id=run_id,
                kind=kind,
                slot=slot,
            )
        if once and lease is not None:
            assert self._leases is not None and slot is not None
            if not await self._leases.take_over(state, slot, lease, run_id):
                return None
        elif once:
            assert self._leases is not None and slot is not None
            claim = await self._leases.claim(state, slot, run_id)
            if not claim.won and claim.error is None and kind == "manual":
                # A slot released after a failure is the operator's to run now.
                claim = ClaimResult(await self._leases.retake(state, slot, run_id))
            if not claim.won:
                if claim.error is not None:
                    self._ended(state, "failed", None, claim.error, None)
                result = "deduped" if claim.error is None else "failed"
                return RunRecord(name, run_id, kind, slot, as_of, result, error=claim.error)
        if slot is not None and self._leases is not None:
            await self._leases.advance(name, slot, run_id)
        started = self._clock.now()
        began = self._clock.monotonic()
        if slot is not None:
            lateness = max(0.0, (started - slot).total_seconds())
            self._metrics.lateness.labels(schedule=name).observe(lateness)
        state.stats.started(run_id, slot, started)
        state.started += 1
        # The loop's next turn comes by the run's max duration (invoke cancels it then).
        self._turned(name, spec.max_duration.total_seconds())
        event(logging.DEBUG, "timer_run_start", schedule=name, run_id=run_id, kind=kind, slot=slot)
        # The handler's budget ends where invoke cancels it: max duration after the start.
        ctx = RunContext(
            as_of=as_of,
            run_id=run_id,
            deadline=began + spec.max_duration.total_seconds(),
            started=began,
            should_stop=self._stopping,
            slot=slot,
            kind=kind,
        )
        outcome = await invoke(
            spec, ctx, clock=self._clock, sleeper=self._sleeper, track=state.track
        )
        result = outcome.result
        duration = max(0.0, self._clock.monotonic() - began)
        summary = summarize(outcome.value) if result == "ok" else None
        self._ended(state, result, summary, outcome.error, duration)
        self._metrics.duration.labels(schedule=name).observe(duration)
        if once:
            assert self._leases is not None and slot is not None
            await self._leases.finish(
                state,
                slot,
                run_id,
                result,
                duration,
                error=outcome.error_class,
                stopping=self._stopping(),
                handed_back=outcome.handed_back,
            )
        event(
            logging.DEBUG if result == "ok" else logging.WARNING,
            "timer_run_end",
            schedule=name,
            run_id=run_id,
            result=result,
            duration=duration,
        )
        return RunRecord(
            name, run_id, kind, slot, as_of, result, started, duration, summary, outcome.error
        )

    async def take_over_expired(
        self, state: ScheduleState, stopping: asyncio.Event
    ) -> list[RunRecord]:
        """Take over and run the schedule's slots whose claimant died or stalled mid-run, or
        that were released for another attempt (lease run out); remember when the next live
        lease runs out. A pause holds them all: one ``paused`` record, the slots untouched
        (looked for again after the poll)."""
        assert self._leases is not None
        records: list[RunRecord] = []
        for slot, lease in await self._leases.unfinished(state):
            if stopping.is_set():
                break
            if self._leases.held(state, lease):
                continue
            record = await self._run(state, slot, "reclaimed", as_of=slot, lease=lease)
            if record is None:
                continue
            self._finished(record)
            records.append(record)
            if record.result == "paused":
                break
        return records

    def _ended(
        self,
        state: ScheduleState,
        result: str,
        summary: Any,
        error: str | None,
        duration: float | None,
    ) -> None:
        state.stats.ended(result, summary, error, duration)
        self._metrics.runs.labels(schedule=state.spec.name, result=result).inc()
        if result == "ok":
            self._metrics.last_success.labels(schedule=state.spec.name).set_to_current_time()
