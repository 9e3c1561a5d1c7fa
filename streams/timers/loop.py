"""The loop of one schedule, and the step it takes each time it wakes: run the slots due
(planned by due_slots.py, each through the executor), then a requested wake-up unless a
slot run already covered it, again while wake-ups keep coming, then take over the expired
slots of a cluster-once schedule. ``TimerRegistry`` starts one loop per enabled schedule
and drives single steps with ``run_due()``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from streams.clock import Clock
from streams.timers.due_slots import count_overlap, plan_runs
from streams.timers.executor import RunExecutor
from streams.timers.logfmt import event
from streams.timers.metrics import TimerMetrics
from streams.timers.misfire import PlannedRun
from streams.timers.ports import Sleeper
from streams.timers.runs import RunRecord
from streams.timers.schedule import Mode
from streams.timers.state import ScheduleState


class ScheduleLoop:
    """Runs schedules' loops and steps for one registry; ``turned(name, within)`` is told
    at every turn the most seconds that may pass before the next one."""

    def __init__(
        self,
        *,
        clock: Clock,
        sleeper: Sleeper,
        metrics: TimerMetrics,
        executor: RunExecutor,
        stopping: asyncio.Event,
        tolerance: timedelta,
        turned: Callable[[str, float], None],
    ) -> None:
        self._clock = clock
        self._sleeper = sleeper
        self._metrics = metrics
        self._executor = executor
        self._stopping = stopping
        self._tolerance = tolerance
        self._turned = turned

    async def run(self, entry: ScheduleState) -> None:
        """The loop of one schedule until the registry stops: wait for the next target (or a
        wake-up), then run what is due."""
        while not self._stopping.is_set():
            # Cleared before reading wake_at, so a wake() from here on is never lost.
            entry.wake_event.clear()
            target = entry.next_target(self._clock.now())
            self._turned(entry.spec.name, (target - self._clock.now()).total_seconds())
            if target > self._clock.now():
                await self._wait(target, entry.wake_event)
            if self._stopping.is_set():
                break
            try:
                await self.step(entry)
            except Exception as exc:
                # step() isolates handlers and the store, so this is a bug; keep the worker up
                # and skip to the next fire time rather than spin on the same failure.
                event(logging.ERROR, "timer_loop_error", schedule=entry.spec.name, exc_info=exc)
                entry.horizon = self._clock.now()

    async def _wait(self, target: datetime, woken_event: asyncio.Event) -> None:
        sleep = asyncio.create_task(self._sleeper.sleep_until(target))
        woken = asyncio.create_task(woken_event.wait())
        try:
            await asyncio.wait({sleep, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleep, woken):
                task.cancel()
            await asyncio.gather(sleep, woken, return_exceptions=True)

    async def step(
        self,
        entry: ScheduleState,
        now: datetime | None = None,
        records: list[RunRecord] | None = None,
    ) -> None:
        """Run what is due, again and again while wake-ups keep coming (a step under steady
        load can last for hours): ``records`` (run_due's) collects the runs, the loop keeps none."""
        if entry.busy:
            # run_due() raced the loop: the run in progress owns this schedule.
            return
        entry.busy = True
        keep = records.append if records is not None else (lambda _record: None)
        # (sequence number, as_of) of every run this step actually started.
        executed: list[tuple[int, datetime]] = []
        try:
            while not self._stopping.is_set():
                planned_at = (now or self._clock.now()) + self._tolerance
                now = None
                if entry.retry_at is not None and planned_at < entry.retry_at:
                    runs: tuple[PlannedRun, ...] = ()  # a claim failed: wait for the backoff
                else:
                    entry.retry_at = None
                    runs = plan_runs(entry, planned_at, self._metrics)
                wake_at, wake_floor = entry.wake_at, entry.wake_floor
                wake_due = wake_at is not None and wake_at <= planned_at
                if wake_due:
                    entry.wake_at = None
                if not runs and not wake_due:
                    break
                for slot, kind in runs:
                    if self._stopping.is_set():
                        break
                    record = await self._executor.run(entry, slot, kind, as_of=slot)
                    keep(record)
                    if record.started_at is not None:
                        executed.append((entry.started, record.as_of))
                    if entry.retry_at is not None:
                        # The claim failed: this slot and the later ones are planned again
                        # after the backoff (the store is likely down for them too).
                        break
                if wake_due and not self._stopping.is_set():
                    assert wake_at is not None
                    # A slot run that started after the request, as of its time or later,
                    # already did what was asked (older runs can't: wake_floor only grows).
                    executed = [(seq, at) for seq, at in executed if seq > wake_floor]
                    if not any(as_of >= wake_at for _, as_of in executed):
                        entry.stats.wakes += 1
                        record = await self._executor.run(
                            entry, None, "wake", as_of=self._clock.now()
                        )
                        keep(record)
                        executed.append((entry.started, record.as_of))
                ended = self._clock.now() + self._tolerance
                count_overlap(entry, planned_at, ended, self._metrics)
                if entry.retry_at is not None:
                    break
            if entry.spec.mode is Mode.CLUSTER_ONCE and not self._stopping.is_set():
                for record in await self._executor.take_over_expired(entry, self._stopping):
                    keep(record)
        finally:
            entry.busy = False
