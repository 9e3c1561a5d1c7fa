"""The one registry of periodic jobs: declaration, lifecycle, wake-ups, manual runs and one
loop per schedule (the loop and its steps: streams/timers/loop.py)."""

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
from streams.timers.executor import RunExecutor
from streams.timers.finished import RunsFinished
from streams.timers.leases import CLAIM_RETRY_FIRST, LEASE_MARGIN, RELEASED_POLL, SlotLeases
from streams.timers.logfmt import event
from streams.timers.loop import ScheduleLoop
from streams.timers.metrics import TimerMetrics
from streams.timers.pauses import PauseCheck, PauseFlags
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
        pauses: PauseFlags | None = None,
    ) -> None:
        self._clock: Clock = clock or SystemClock()
        self._sleeper: Sleeper = sleeper or ClockSleeper(self._clock)
        self._metrics = metrics or TimerMetrics(CollectorRegistry())
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._handlers: Mapping[str, Handler] = handlers or {}
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
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
        self._pauses = None if pauses is None else PauseCheck(pauses, self._metrics)
        self._executor = RunExecutor(
            pauses=self._pauses,
            clock=self._clock,
            sleeper=self._sleeper,
            metrics=self._metrics,
            leases=self._leases,
            stopping=self._stopping.is_set,
            turned=self._turned,
            finished=self._finished.ended,
        )
        self._loops = ScheduleLoop(
            clock=self._clock,
            sleeper=self._sleeper,
            metrics=self._metrics,
            executor=self._executor,
            stopping=self._stopping,
            tolerance=tick_tolerance,
            turned=self._turned,
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

    async def refresh_pauses(self) -> None:
        """Read every schedule's cluster-wide pause flag now (one query; /timers shows it)."""
        if self._pauses is not None:
            await self._pauses.refresh(builtins.list(self._entries.values()))

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
                self._loops.run(entry), name=f"timer-loop:{entry.spec.name}"
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
        self,
        name: str,
        as_of: datetime | None = None,
        *,
        rerun: bool = False,
        ignore_pause: bool = False,
    ) -> RunRecord:
        """Run, now, the slot of ``name`` that ``as_of`` (default: the clock) falls in, through
        the path a scheduled slot takes: a cluster-once slot is claimed insert-wins first, so
        one that ran (or runs) elsewhere comes back ``deduped``; the handler gets the slot's
        time as its ``as_of`` and its max duration. ``rerun`` runs a claimed slot once more
        without claiming it (an operator's retry of an idempotent job). A slot whose time has
        not come is refused: claiming it early would take it from its scheduled run. A job
        paused cluster-wide is not run (``paused``, nothing claimed) unless ``ignore_pause``."""
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
            return await self._executor.run(
                entry, None, "manual_rerun", as_of=slot, ignore_pause=ignore_pause
            )
        return await self._executor.run(
            entry, slot, "manual", as_of=slot, ignore_pause=ignore_pause
        )

    # -- single steps ------------------------------------------------------------------------

    async def run_due(self, now: datetime | None = None) -> builtins.list[RunRecord]:
        """Run everything due at ``now`` (default: the clock) for every schedule, then return.

        The first call after construction only sets the baseline when nothing is persisted.
        """
        self._frozen = True
        await self._load()
        records: list[RunRecord] = []
        for entry in self._enabled():
            await self._loops.step(entry, now, records)
        return records
