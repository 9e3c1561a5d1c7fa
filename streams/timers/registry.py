"""The one registry of periodic jobs: declaration, lifecycle, wake-ups and one loop per schedule."""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
import socket
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from streams.clock import Clock, SystemClock
from streams.timers import slots
from streams.timers.due_slots import count_overlap, plan_runs
from streams.timers.executor import RunExecutor
from streams.timers.finished import RunsFinished
from streams.timers.leases import CLAIM_RETRY_FIRST, LEASE_MARGIN, RELEASED_POLL, SlotLeases
from streams.timers.logfmt import event
from streams.timers.metrics import TimerMetrics
from streams.timers.misfire import PlannedRun
from streams.timers.ports import ClockSleeper, Sleeper, TimerStore
from streams.timers.runs import RunRecord
from streams.timers.schedule import (
    Handler,
    Mode,
    RegistrationError,
    ResolvedSchedule,
    Schedule,
    resolve,
)
from streams.timers.state import ScheduleState
from streams.timers.view import schedule_view


class TimerRegistry:
    """Every periodic job of a worker: declared here, validated at startup, run by one loop each.

    Declare before ``start()``; ``run_due()`` drives one deterministic step (tests, burst mode).
    """

    def __init__(
        self,
        *,
        store: TimerStore | None = None,
        clock: Clock | None = None,
        sleeper: Sleeper | None = None,
        metrics: TimerMetrics | None = None,
        environ: Mapping[str, str] | None = None,
        handlers: Mapping[str, Handler] | None = None,
        worker_id: str | None = None,
        tick_tolerance: timedelta = timedelta(0),
        lease_margin: timedelta = LEASE_MARGIN,
        claim_retry: timedelta = CLAIM_RETRY_FIRST,
        released_poll: timedelta = RELEASED_POLL,
    ) -> None:
        self._clock: Clock = clock or SystemClock()
        self._sleeper: Sleeper = sleeper or ClockSleeper(self._clock)
        self._metrics = metrics or TimerMetrics(CollectorRegistry())
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._handlers: Mapping[str, Handler] = handlers or {}
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self._tolerance = tick_tolerance
        self._store = store
        self._leases = (
            None
            if store is None
            else SlotLeases(
                store,
                clock=self._clock,
                metrics=self._metrics,
                worker_id=self.worker_id,
                lease_margin=lease_margin,
                claim_retry=claim_retry,
                released_poll=released_poll,
            )
        )
        self._stopping = asyncio.Event()
        self._finished = RunsFinished()
        self._executor = RunExecutor(
            clock=self._clock,
            sleeper=self._sleeper,
            metrics=self._metrics,
            leases=self._leases,
            stopping=self._stopping.is_set,
            turned=self._turned,
            finished=self._finished.ended,
        )
        self._entries: dict[str, ScheduleState] = {}
        self._frozen = False
        self._loaded = False
        self._started = False
        self._on_turn: Callable[[str, float], None] | None = None

    # -- declaration -------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        """True once stop() was called: long handlers check it between units of work."""
        return self._stopping.is_set()

    def register(self, schedule: Schedule) -> ResolvedSchedule:
        """Validate and add a schedule; raises RegistrationError naming the schedule and setting."""
        [spec] = self.register_all([schedule])
        return spec

    def register_all(self, schedules: Iterable[Schedule]) -> builtins.list[ResolvedSchedule]:
        """Validate every schedule first and add them only if all are valid (all or nothing)."""
        specs: list[ResolvedSchedule] = []
        taken = set(self._entries)
        for schedule in schedules:
            spec = self._validate(schedule, taken)
            taken.add(spec.name)
            specs.append(spec)
        for spec in specs:
            self._entries[spec.name] = ScheduleState(spec)
            self._metrics.prime(spec.name)
            event(
                logging.INFO,
                "timer_registered",
                schedule=spec.name,
                mode=spec.mode.value,
                cadence=spec.cadence.describe(),
                misfire=spec.misfire.value,
                enabled=spec.enabled,
            )
        return specs

    def _validate(self, schedule: Schedule, taken: set[str]) -> ResolvedSchedule:
        if self._frozen:
            raise RegistrationError(
                schedule.name,
                "registration",
                "registered after the timer registry started; declare every schedule first",
            )
        if schedule.name in taken:
            raise RegistrationError(schedule.name, "name", "duplicate schedule name")
        spec = resolve(
            schedule, environ=self._environ, handlers=self._handlers, now=self._clock.now()
        )
        if spec.mode is Mode.CLUSTER_ONCE and self._store is None:
            raise RegistrationError(
                spec.name, "mode", "cluster_once needs a slot store (TimerRegistry(store=...))"
            )
        return spec

    def get(self, name: str) -> ResolvedSchedule:
        return self._entry(name).spec

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def _entry(self, name: str) -> ScheduleState:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"no timer schedule named {name!r}") from None

    def _enabled(self) -> Iterable[ScheduleState]:
        return (e for e in self._entries.values() if e.spec.enabled and e.delegate is None)

    def delegate(self, names: Iterable[str], wake: Callable[[str, datetime | None], None]) -> None:
        """Leave ``names`` to another process of this worker (its timer process): ``start()``
        runs no loop for them and their wake-ups go to ``wake(name, at)``."""
        if self._started:
            raise RuntimeError("delegate() before start()")
        for name in names:
            self._entry(name).delegate = wake

    def report_turns(self, on_turn: Callable[[str, float], None]) -> None:
        """Tell ``on_turn(name, within)`` at every turn of a schedule's loop the most seconds
        that may pass before its next turn: the rest of its wait, or a run's max duration (the
        run is cancelled then). A loop that misses it is stuck (the timer process's watch)."""
        if self._started:
            raise RuntimeError("report_turns() before start()")
        self._on_turn = on_turn

    def _turned(self, name: str, within: float) -> None:
        if self._on_turn is not None:
            self._on_turn(name, max(0.0, within))

    def on_run_finished(self, callback: Callable[[RunRecord], None]) -> None:
        """Tell ``callback`` the record of every run that ends, of every schedule, as it ends
        (before the schedule's loop goes on): ok, failed, timeout, cancelled, deduped."""
        self._finished.subscribe(callback)

    def finished_runs(self, name: str) -> int:
        """How many runs of ``name`` have ended since the registry was built."""
        self._entry(name)
        return self._finished.count(name)

    async def run_finished(self, name: str, count: int | None = None) -> RunRecord:
        """Wait until ``count`` runs of ``name`` in all have ended (default: one more than
        now); the record of the latest (see RunsFinished.wait)."""
        self._entry(name)
        return await self._finished.wait(name, count)

    def list(self) -> builtins.list[dict[str, Any]]:
        """Every schedule as a plain JSON-able dict (for the web view)."""
        now = self._clock.now()
        return [schedule_view(entry, now) for entry in self._entries.values()]

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Freeze the declarations and start one loop per enabled schedule."""
        if self._started:
            raise RuntimeError("timer registry already started")
        self._frozen = True
        self._started = True
        await self._load()
        for entry in self._enabled():
            entry.loop_task = asyncio.create_task(
                self._loop(entry), name=f"timer-loop:{entry.spec.name}"
            )
        event(
            logging.INFO,
            "timer_registry_started",
            worker=self.worker_id,
            schedules=len(self._entries),
        )

    # A bound in seconds is the API (SIGTERM handlers pass the grace period they have).
    async def stop(self, timeout: float = 10.0, *, cancel_grace: float = 5.0) -> None:
        """Let current runs finish within ``timeout`` s, then cancel them (their transactions
        roll back) and wait up to ``cancel_grace`` s more for that."""
        self._stopping.set()
        for entry in self._entries.values():
            entry.wake_event.set()
        tasks = [e.loop_task for e in self._entries.values() if e.loop_task is not None]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        if pending:
            for entry in self._entries.values():
                if entry.current is not None and not entry.current.done():
                    entry.current.cancel()
            _, pending = await asyncio.wait(pending, timeout=cancel_grace)
        for task in pending:
            # A handler that swallows cancellation; give up on it rather than hang shutdown.
            event(logging.ERROR, "timer_stop_abandoned", task=task.get_name())
            task.cancel()
        event(logging.INFO, "timer_registry_stopped", worker=self.worker_id)

    async def interrupt(self, grace: float) -> None:
        """Stop a manual run (``run_slot``) as a worker's stop would: handlers see
        ``stopping`` and may hand their slot back; whatever still runs after ``grace`` s is
        cancelled, which hands a cluster-once slot back too (no attempt counted)."""
        self._stopping.set()
        running = [
            e.current
            for e in self._entries.values()
            if e.current is not None and not e.current.done()
        ]
        if not running:
            return
        _, pending = await asyncio.wait(running, timeout=grace)
        for task in pending:
            task.cancel()

    async def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        now = self._clock.now()
        persisted: dict[str, datetime] = {}
        names = [e.spec.name for e in self._enabled()]
        if self._store is not None and names:
            try:
                persisted = await self._store.last_slots(names)
            except Exception as exc:
                # Without the last slots a restart cannot see missed slots; keep running.
                event(logging.WARNING, "timer_state_load_failed", error=type(exc).__name__)
        for entry in self._enabled():
            entry.horizon = persisted.get(entry.spec.name, now)
            if entry.spec.mode is Mode.CLUSTER_ONCE:
                # Slots a dead claimant left unfinished are looked for at once.
                entry.lease_check_at = now

    def wake(self, name: str, at: datetime | None = None) -> None:
        """Ask for an extra run of an every-instance schedule now (or at ``at``).

        Never overlaps: a wake-up during a run is served right after it. Several wake-ups
        before a run collapse into one.
        """
        entry = self._entry(name)
        if entry.spec.mode is not Mode.EVERY_INSTANCE:
            raise ValueError(f"timer schedule {name!r} is cluster_once; only every_instance wakes")
        if entry.delegate is not None:
            entry.delegate(name, at)
            return
        when = at or self._clock.now()
        if entry.wake_at is None or when < entry.wake_at:
            entry.wake_at = when
        entry.wake_floor = max(entry.wake_floor, entry.started)
        entry.wake_event.set()

    # -- manual runs -------------------------------------------------------------------------

    async def run_slot(
        self, name: str, as_of: datetime | None = None, *, rerun: bool = False
    ) -> RunRecord:
        """Run, now, the slot of ``name`` that ``as_of`` (default: the clock) falls in, through
        the path a scheduled slot takes: a cluster-once slot is claimed insert-wins first, so
        one that ran (or runs) elsewhere comes back ``deduped``; the handler gets the slot's
        time as its ``as_of`` and its max duration. ``rerun`` runs a claimed slot once more
        without claiming it (an operator's retry of an idempotent job). A slot whose time has
        not come is refused: claiming it early would take it from its scheduled run."""
        entry = self._entry(name)
        now = self._clock.now()
        when = now if as_of is None else as_of
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError("as_of must be timezone-aware")
        if when > now:
            raise ValueError(f"as_of {slots.iso_utc(when)} is in the future")
        self._frozen = True
        slot = slots.slot_at(entry.spec.cadence, when)
        if rerun:
            return await self._executor.run(entry, None, "manual_rerun", as_of=slot)
        return await self._executor.run(entry, slot, "manual", as_of=slot)

    # -- the loop ----------------------------------------------------------------------------

    async def _loop(self, entry: ScheduleState) -> None:
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
                await self._step(entry)
            except Exception as exc:
                # _step isolates handlers and the store, so this is a bug; keep the worker up
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

    async def run_due(self, now: datetime | None = None) -> builtins.list[RunRecord]:
        """Run everything due at ``now`` (default: the clock) for every schedule, then return.

        The first call after construction only sets the baseline when nothing is persisted.
        """
        self._frozen = True
        await self._load()
        records: list[RunRecord] = []
        for entry in self._enabled():
            await self._step(entry, now, records)
        return records

    async def _step(
        self,
        entry: ScheduleState,
        now: datetime | None = None,
        records: builtins.list[RunRecord] | None = None,
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
