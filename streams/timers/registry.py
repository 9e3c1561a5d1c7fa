"""The one registry of periodic jobs: per-schedule loops, anti-overlap, slot claims and misfire."""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import json
import logging
import os
import socket
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from streams.clock import Clock, SystemClock
from streams.timers import slots
from streams.timers.metrics import TimerMetrics
from streams.timers.schedule import (
    Handler,
    Misfire,
    Mode,
    RegistrationError,
    ResolvedSchedule,
    Schedule,
    resolve,
)

log = logging.getLogger("streams.timers")

# Slots remembered per planning step; the catch-up window is validated to fit in it.
MAX_BACKLOG = 1000
# A cluster-once claim is held for the schedule's max duration plus this margin (time from
# claim to start, cancellation unwinding, clock skew between workers).
LEASE_MARGIN = timedelta(seconds=10)
# Backoff between retries of a slot whose claim failed (store unavailable): first, at most.
CLAIM_RETRY_FIRST = timedelta(seconds=1)
CLAIM_RETRY_MAX = timedelta(seconds=30)
_SUMMARY_CHARS = 500
_ERROR_CHARS = 300


class TimerStore(Protocol):
    """What the registry needs from PostgreSQL (db.timers.TimerRepository implements it)."""

    async def last_slots(self, names: Sequence[str]) -> dict[str, datetime]: ...

    async def claim_slot(
        self,
        name: str,
        slot: datetime,
        claimed_by: str,
        run_id: str,
        lease_expires_at: datetime | None = None,
    ) -> bool:
        """Insert-wins claim of (name, slot), held until ``lease_expires_at``: True for
        exactly one caller."""
        ...

    async def reclaim_slot(
        self,
        name: str,
        slot: datetime,
        claimed_by: str,
        run_id: str,
        lease_expires_at: datetime,
        now: datetime,
    ) -> bool:
        """Take over (name, slot) if its run never finished and its lease ran out by ``now``:
        True for at most one caller."""
        ...

    async def unfinished_slots(
        self, name: str, since: datetime, limit: int
    ) -> builtins.list[tuple[datetime, datetime]]:
        """(slot, lease_expires_at) of the slots of ``name`` from ``since`` on whose run has
        not finished, oldest first."""
        ...

    async def advance_state(self, name: str, slot: datetime, worker: str) -> None:
        """Remember ``slot`` as the latest started slot of ``name`` (never moves backwards)."""
        ...

    async def finish_slot(
        self, name: str, slot: datetime, run_id: str, result: str, duration_seconds: float
    ) -> bool:
        """Record the end of run ``run_id``; False when the slot was taken over meanwhile."""
        ...

    async def prune_slots(self, before: datetime, limit: int) -> int: ...


class Sleeper(Protocol):
    async def sleep_until(self, instant: datetime) -> None:
        """Return once the clock reads ``instant`` or later (tests fake this to skip waiting)."""
        ...


class ClockSleeper:
    """Real waiting against a Clock; re-reads the clock so wall-clock steps are honoured."""

    def __init__(self, clock: Clock, max_nap: float = 30.0) -> None:
        self._clock = clock
        self._max_nap = max_nap

    async def sleep_until(self, instant: datetime) -> None:
        while True:
            delay = (instant - self._clock.now()).total_seconds()
            if delay <= 0:
                return
            await asyncio.sleep(min(delay, self._max_nap))


@dataclass
class _Claim:
    claimed_by: str
    run_id: str
    lease_expires_at: datetime | None
    result: str | None = None
    takeovers: int = 0


class InMemoryTimerStore:
    """A TimerStore in one process (tests, single-worker tools); claims are insert-wins too."""

    def __init__(self) -> None:
        self.slots: dict[tuple[str, datetime], _Claim] = {}
        self.state: dict[str, datetime] = {}

    @property
    def claims(self) -> dict[tuple[str, datetime], str]:
        return {k: c.claimed_by for k, c in self.slots.items()}

    @property
    def finished(self) -> dict[tuple[str, datetime], str]:
        return {k: c.result for k, c in self.slots.items() if c.result is not None}

    async def last_slots(self, names: Sequence[str]) -> dict[str, datetime]:
        return {n: self.state[n] for n in names if n in self.state}

    async def claim_slot(
        self,
        name: str,
        slot: datetime,
        claimed_by: str,
        run_id: str,
        lease_expires_at: datetime | None = None,
    ) -> bool:
        if (name, slot) in self.slots:
            return False
        self.slots[(name, slot)] = _Claim(claimed_by, run_id, lease_expires_at)
        return True

    async def reclaim_slot(
        self,
        name: str,
        slot: datetime,
        claimed_by: str,
        run_id: str,
        lease_expires_at: datetime,
        now: datetime,
    ) -> bool:
        claim = self.slots.get((name, slot))
        if (
            claim is None
            or claim.result is not None
            or claim.lease_expires_at is None
            or claim.lease_expires_at > now
        ):
            return False
        claim.claimed_by, claim.run_id, claim.lease_expires_at = (
            claimed_by,
            run_id,
            lease_expires_at,
        )
        claim.takeovers += 1
        return True

    async def unfinished_slots(
        self, name: str, since: datetime, limit: int
    ) -> builtins.list[tuple[datetime, datetime]]:
        found = sorted(
            (slot, c.lease_expires_at)
            for (n, slot), c in self.slots.items()
            if n == name and slot >= since and c.result is None and c.lease_expires_at is not None
        )
        return found[:limit]

    async def advance_state(self, name: str, slot: datetime, worker: str) -> None:
        if name not in self.state or self.state[name] < slot:
            self.state[name] = slot

    async def finish_slot(
        self, name: str, slot: datetime, run_id: str, result: str, duration_seconds: float
    ) -> bool:
        claim = self.slots.get((name, slot))
        if claim is None or claim.run_id != run_id:
            return False
        claim.result = result
        return True

    async def prune_slots(self, before: datetime, limit: int) -> int:
        old = [k for k in self.slots if k[1] < before][:limit]
        for k in old:
            self.slots.pop(k)
        return len(old)


@dataclass(frozen=True)
class RunRecord:
    """What happened to one slot (or wake-up) of one schedule in this worker."""

    schedule: str
    run_id: str
    # on_time, catch_up, coalesced, reclaimed (taken over from a claimant that died or
    # stalled mid-run), wake, manual or manual_rerun (run_slot)
    kind: str
    slot: datetime | None
    as_of: datetime
    # ok, failed, timeout, cancelled - or deduped when another worker owns the slot
    result: str
    started_at: datetime | None = None
    duration_seconds: float | None = None
    summary: Any = None
    error: str | None = None


@dataclass(frozen=True)
class PruneResult:
    deleted: int

    def summary(self) -> dict[str, int]:
        return {"deleted": self.deleted}


class SlotPruner:
    """Handler that deletes slot claims older than ``retention``; register it like any schedule."""

    def __init__(
        self, store: TimerStore, retention: timedelta = timedelta(days=7), batch: int = 10_000
    ) -> None:
        self._store = store
        self._retention = retention
        self._batch = batch

    async def run_once(self, as_of: datetime) -> PruneResult:
        deleted = 0
        while True:
            n = await self._store.prune_slots(as_of - self._retention, self._batch)
            deleted += n
            if n < self._batch:
                return PruneResult(deleted)


@dataclass
class _Stats:
    runs: int = 0
    failed: int = 0
    timed_out: int = 0
    cancelled: int = 0
    skipped_overlap: int = 0
    deduped: int = 0
    missed: int = 0
    wakes: int = 0
    claim_retries: int = 0
    reclaimed: int = 0
    lease_lost: int = 0
    last_slot: datetime | None = None
    last_started_at: datetime | None = None
    last_duration_seconds: float | None = None
    last_result: str | None = None
    last_summary: Any = None
    last_error: str | None = None
    last_run_id: str | None = None


@dataclass
class _Entry:
    spec: ResolvedSchedule
    stats: _Stats = field(default_factory=_Stats)
    # Every slot at or before the horizon has been planned (run, deduped, missed or skipped).
    horizon: datetime | None = None
    # Missed slots up to here are counted already (a slot planned again after a failed claim
    # is counted once).
    missed_until: datetime | None = None
    # After a failed slot claim: no planning before retry_at (backoff), consecutive failures.
    retry_at: datetime | None = None
    claim_failures: int = 0
    # Cluster-once: when the next unfinished slot's lease runs out (look for a takeover then).
    lease_check_at: datetime | None = None
    wake_at: datetime | None = None
    # Runs started so far, and how many had started when the pending wake-up was asked for:
    # only a run that starts after the request can serve it.
    started: int = 0
    wake_floor: int = 0
    busy: bool = False
    current: asyncio.Task[object] | None = None
    loop_task: asyncio.Task[None] | None = None
    wake_event: asyncio.Event = field(default_factory=asyncio.Event)


def summarize(value: object) -> Any:
    """A short JSON-able summary of a handler result (its summary(), a dataclass, or repr)."""
    try:
        method = getattr(value, "summary", None)
        if callable(method):
            value = method()
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        text = json.dumps(value, default=str)
    except Exception:
        return repr(value)[:_SUMMARY_CHARS]
    if len(text) > _SUMMARY_CHARS:
        return text[:_SUMMARY_CHARS]
    return json.loads(text)


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return slots.iso_utc(value)
    if isinstance(value, float):
        return f"{value:.3f}"
    text = str(value)
    if not text or any(c in text for c in ' ="'):
        return json.dumps(text)
    return text


def _log(level: int, action: str, **fields: object) -> None:
    if log.isEnabledFor(level):
        exc = fields.pop("exc_info", None)
        parts = [f"action={action}", *(f"{k}={_fmt(v)}" for k, v in fields.items())]
        log.log(level, " ".join(parts), exc_info=exc if isinstance(exc, BaseException) else None)


def _iso(when: datetime | None) -> str | None:
    return None if when is None else slots.iso_utc(when)


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
    ) -> None:
        self._store = store
        self._clock: Clock = clock or SystemClock()
        self._sleeper: Sleeper = sleeper or ClockSleeper(self._clock)
        self._metrics = metrics or TimerMetrics(CollectorRegistry())
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._handlers: Mapping[str, Handler] = handlers or {}
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self._tolerance = tick_tolerance
        self._lease_margin = lease_margin
        self._claim_retry = claim_retry
        self._entries: dict[str, _Entry] = {}
        self._frozen = False
        self._loaded = False
        self._started = False
        self._stopping = asyncio.Event()

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
            self._entries[spec.name] = _Entry(spec)
            self._metrics.prime(spec.name)
            _log(
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

    def _entry(self, name: str) -> _Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"no timer schedule named {name!r}") from None

    def _enabled(self) -> Iterable[_Entry]:
        return (e for e in self._entries.values() if e.spec.enabled)

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
        _log(
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
            _log(logging.ERROR, "timer_stop_abandoned", task=task.get_name())
            task.cancel()
        _log(logging.INFO, "timer_registry_stopped", worker=self.worker_id)

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
                _log(logging.WARNING, "timer_state_load_failed", error=type(exc).__name__)
        for entry in self._enabled():
            entry.horizon = persisted.get(entry.spec.name, now)
            if entry.spec.mode is Mode.CLUSTER_ONCE:
                # Slots a dead claimant left unfinished are looked for at once.
                entry.lease_check_at = now

    # -- wake-ups ----------------------------------------------------------------------------

    def wake(self, name: str, at: datetime | None = None) -> None:
        """Ask for an extra run of an every-instance schedule now (or at ``at``).

        Never overlaps: a wake-up during a run is served right after it. Several wake-ups
        before a run collapse into one.
        """
        entry = self._entry(name)
        if entry.spec.mode is not Mode.EVERY_INSTANCE:
            raise ValueError(f"timer schedule {name!r} is cluster_once; only every_instance wakes")
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
            return await self._run(entry, None, "manual_rerun", as_of=slot)
        return await self._run(entry, slot, "manual", as_of=slot)

    # -- the loop ----------------------------------------------------------------------------

    async def _loop(self, entry: _Entry) -> None:
        while not self._stopping.is_set():
            # Cleared before reading wake_at, so a wake() from here on is never lost.
            entry.wake_event.clear()
            target = self._next_target(entry)
            if target > self._clock.now():
                await self._wait(target, entry.wake_event)
            if self._stopping.is_set():
                break
            try:
                await self._step(entry)
            except Exception as exc:
                # _step isolates handlers and the store, so this is a bug; keep the worker up
                # and skip to the next fire time rather than spin on the same failure.
                _log(logging.ERROR, "timer_loop_error", schedule=entry.spec.name, exc_info=exc)
                entry.horizon = self._clock.now()

    def _next_target(self, entry: _Entry) -> datetime:
        horizon = entry.horizon or self._clock.now()
        target = slots.next_fire(entry.spec.cadence, horizon)
        if entry.retry_at is not None and target < entry.retry_at:
            target = entry.retry_at
        for extra in (entry.wake_at, entry.lease_check_at):
            if extra is not None and extra < target:
                target = extra
        return target

    async def _wait(self, target: datetime, event: asyncio.Event) -> None:
        sleep = asyncio.create_task(self._sleeper.sleep_until(target))
        woken = asyncio.create_task(event.wait())
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
            records.extend(await self._step(entry, now))
        return records

    async def _step(self, entry: _Entry, now: datetime | None = None) -> builtins.list[RunRecord]:
        if entry.busy:
            # run_due() raced the loop: the run in progress owns this schedule.
            return []
        entry.busy = True
        records: list[RunRecord] = []
        # (sequence number, as_of) of every run this step actually started.
        executed: list[tuple[int, datetime]] = []
        try:
            while not self._stopping.is_set():
                planned_at = (now or self._clock.now()) + self._tolerance
                now = None
                if entry.retry_at is not None and planned_at < entry.retry_at:
                    runs = []  # a claim failed: wait for the backoff before planning again
                else:
                    entry.retry_at = None
                    runs = self._plan(entry, planned_at)
                wake_at, wake_floor = entry.wake_at, entry.wake_floor
                wake_due = wake_at is not None and wake_at <= planned_at
                if wake_due:
                    entry.wake_at = None
                if not runs and not wake_due:
                    break
                for slot, kind in runs:
                    if self._stopping.is_set():
                        break
                    record = await self._run(entry, slot, kind, as_of=slot)
                    records.append(record)
                    if record.started_at is not None:
                        executed.append((entry.started, record.as_of))
                    if entry.retry_at is not None:
                        # The claim failed: this slot and the later ones are planned again
                        # after the backoff (the store is likely down for them too).
                        break
                if wake_due and not self._stopping.is_set():
                    assert wake_at is not None
                    # A slot run that started after the request, as of its time or later,
                    # already did what was asked.
                    if not any(seq > wake_floor and as_of >= wake_at for seq, as_of in executed):
                        entry.stats.wakes += 1
                        record = await self._run(entry, None, "wake", as_of=self._clock.now())
                        records.append(record)
                        executed.append((entry.started, record.as_of))
                self._count_overlap(entry, planned_at)
                if entry.retry_at is not None:
                    break
            if entry.spec.mode is Mode.CLUSTER_ONCE and not self._stopping.is_set():
                records.extend(await self._reclaim_expired(entry))
        finally:
            entry.busy = False
        return records

    def _count_overlap(self, entry: _Entry, planned_at: datetime) -> None:
        # Ticks that fired while this step was running were skipped because of overlap;
        # the next planning pass decides whether they still run (grace, misfire policy).
        ended = self._clock.now() + self._tolerance
        skipped = slots.slots_between(entry.spec.cadence, planned_at, ended, keep=1).count
        if skipped:
            entry.stats.skipped_overlap += skipped
            self._metrics.overlap_skips.labels(schedule=entry.spec.name).inc(skipped)
            _log(logging.WARNING, "timer_overlap_skip", schedule=entry.spec.name, ticks=skipped)

    def _plan(self, entry: _Entry, now: datetime) -> builtins.list[tuple[datetime, str]]:
        """Which slots to run now: the on-time one, plus missed ones per the misfire policy."""
        spec = entry.spec
        if entry.horizon is None:
            entry.horizon = now
            return []
        if now <= entry.horizon:
            return []
        horizon = entry.horizon
        due = slots.slots_between(spec.cadence, horizon, now, keep=MAX_BACKLOG)
        entry.horizon = now
        if due.count == 0:
            return []
        latest = due.latest[-1]
        on_time = latest if now - latest <= spec.misfire_grace else None
        missed = list(due.latest[:-1] if on_time else due.latest)
        missed_count = due.count - (1 if on_time else 0)
        runs: list[tuple[datetime, str]] = []
        if missed_count:
            fresh = missed_count
            counted = entry.missed_until
            if counted is not None and counted > horizon:
                # Planned again after a failed claim: those were counted the first time.
                fresh -= slots.slots_between(spec.cadence, horizon, min(counted, now)).count
            if missed:
                entry.missed_until = max(missed[-1], counted or missed[-1])
            if fresh > 0:
                entry.stats.missed += fresh
                self._metrics.missed.labels(schedule=spec.name).inc(fresh)
            _log(
                logging.WARNING,
                "timer_missed_slots",
                schedule=spec.name,
                count=missed_count,
                first=missed[0] if missed else None,
                last=missed[-1] if missed else None,
                policy=spec.misfire.value,
            )
            if spec.misfire is Misfire.CATCH_UP:
                assert spec.catch_up_window is not None
                oldest = now - spec.catch_up_window
                runs.extend((s, "catch_up") for s in missed if s >= oldest)
            elif spec.misfire is Misfire.COALESCE and missed:
                runs.append((missed[-1], "coalesced"))
        if on_time is not None:
            runs.append((on_time, "on_time"))
        return runs

    # -- one run -----------------------------------------------------------------------------

    def _lease(self, entry: _Entry) -> datetime:
        """Until when a claim made now holds its slot: the run is cancelled at its max
        duration, so a live holder finishes (and releases the slot) before that."""
        return self._clock.now() + entry.spec.max_duration + self._lease_margin

    def _claim_failed(self, entry: _Entry, slot: datetime) -> None:
        """Plan ``slot`` (and what follows it) again after a backoff; the misfire policy
        decides then whether it still runs."""
        entry.claim_failures += 1
        entry.stats.claim_retries += 1
        backoff = min(self._claim_retry * 2 ** (entry.claim_failures - 1), CLAIM_RETRY_MAX)
        entry.retry_at = self._clock.now() + backoff
        if entry.horizon is None or entry.horizon >= slot:
            entry.horizon = slot - timedelta(microseconds=1)

    async def _run(
        self,
        entry: _Entry,
        slot: datetime | None,
        kind: str,
        *,
        as_of: datetime,
        run_id: str | None = None,
        claimed: bool = False,
    ) -> RunRecord:
        """Claim (cluster-once, unless ``claimed`` already) and run one slot or wake-up."""
        spec, stats = entry.spec, entry.stats
        name = spec.name
        run_id = run_id or uuid.uuid4().hex
        if slot is not None and spec.mode is Mode.CLUSTER_ONCE and not claimed:
            assert self._store is not None
            try:
                won = await self._store.claim_slot(
                    name, slot, self.worker_id, run_id, self._lease(entry)
                )
            except Exception as exc:
                claim_error = f"slot claim failed: {type(exc).__name__}"
                self._claim_failed(entry, slot)
                _log(
                    logging.ERROR,
                    "timer_claim_failed",
                    schedule=name,
                    run_id=run_id,
                    slot=slot,
                    error=type(exc).__name__,
                    retry_at=entry.retry_at,
                )
                self._record_outcome(entry, "failed", None, claim_error, None)
                return RunRecord(name, run_id, kind, slot, as_of, "failed", error=claim_error)
            entry.claim_failures = 0
            entry.retry_at = None
            if not won:
                stats.deduped += 1
                self._metrics.dedupes.labels(schedule=name).inc()
                _log(logging.DEBUG, "timer_slot_deduped", schedule=name, slot=slot)
                return RunRecord(name, run_id, kind, slot, as_of, "deduped")
        if slot is not None and self._store is not None:
            try:
                await self._store.advance_state(name, slot, self.worker_id)
            except Exception as exc:
                _log(
                    logging.WARNING,
                    "timer_state_advance_failed",
                    schedule=name,
                    run_id=run_id,
                    error=type(exc).__name__,
                )
        started = self._clock.now()
        began = self._clock.monotonic()
        if slot is not None:
            stats.last_slot = slot
            lateness = max(0.0, (started - slot).total_seconds())
            self._metrics.lateness.labels(schedule=name).observe(lateness)
        stats.last_started_at = started
        stats.last_run_id = run_id
        entry.started += 1
        _log(logging.DEBUG, "timer_run_start", schedule=name, run_id=run_id, kind=kind, slot=slot)
        result, value, error = await self._execute(entry, as_of, run_id)
        duration = max(0.0, self._clock.monotonic() - began)
        summary = summarize(value) if result == "ok" else None
        self._record_outcome(entry, result, summary, error, duration)
        self._metrics.duration.labels(schedule=name).observe(duration)
        if slot is not None and spec.mode is Mode.CLUSTER_ONCE:
            assert self._store is not None
            try:
                owned = await self._store.finish_slot(name, slot, run_id, result, duration)
            except Exception as exc:
                _log(
                    logging.WARNING,
                    "timer_finish_failed",
                    schedule=name,
                    run_id=run_id,
                    error=type(exc).__name__,
                )
            else:
                if not owned:
                    # Our lease ran out (paused or too slow) and another worker took the slot
                    # over: its record stands, ours is not written.
                    stats.lease_lost += 1
                    _log(
                        logging.WARNING,
                        "timer_lease_lost",
                        schedule=name,
                        run_id=run_id,
                        slot=slot,
                        result=result,
                    )
        _log(
            logging.DEBUG if result == "ok" else logging.WARNING,
            "timer_run_end",
            schedule=name,
            run_id=run_id,
            result=result,
            duration=duration,
        )
        return RunRecord(name, run_id, kind, slot, as_of, result, started, duration, summary, error)

    def _reclaim_floor(self, spec: ResolvedSchedule, now: datetime) -> datetime:
        """The oldest slot still worth running after its claimant died: within the catch-up
        window for catch_up; otherwise only the latest slot (skip and coalesce never replay
        an older slot - the next one does its work)."""
        if spec.misfire is Misfire.CATCH_UP:
            assert spec.catch_up_window is not None
            return now - spec.catch_up_window
        return slots.slot_at(spec.cadence, now)

    async def _reclaim_expired(self, entry: _Entry) -> builtins.list[RunRecord]:
        """Take over and run this schedule's slots whose claimant died or stalled mid-run
        (unfinished, lease expired); remember when the next live lease runs out."""
        spec = entry.spec
        name = spec.name
        assert self._store is not None
        now = self._clock.now()
        entry.lease_check_at = None
        try:
            unfinished = await self._store.unfinished_slots(
                name, self._reclaim_floor(spec, now), MAX_BACKLOG
            )
        except Exception as exc:
            _log(
                logging.WARNING, "timer_lease_check_failed", schedule=name, error=type(exc).__name__
            )
            entry.lease_check_at = now + self._claim_retry
            return []
        records: list[RunRecord] = []
        for slot, lease in unfinished:
            if self._stopping.is_set():
                break
            now = self._clock.now()
            if lease > now:
                # Still held by a live (or not yet presumed dead) claimant.
                if entry.lease_check_at is None or lease < entry.lease_check_at:
                    entry.lease_check_at = lease
                continue
            run_id = uuid.uuid4().hex
            try:
                won = await self._store.reclaim_slot(
                    name, slot, self.worker_id, run_id, self._lease(entry), now
                )
            except Exception as exc:
                _log(
                    logging.WARNING,
                    "timer_reclaim_failed",
                    schedule=name,
                    slot=slot,
                    error=type(exc).__name__,
                )
                entry.lease_check_at = now + self._claim_retry
                continue
            if not won:
                continue  # another worker took it over first
            entry.stats.reclaimed += 1
            _log(
                logging.WARNING,
                "timer_slot_reclaimed",
                schedule=name,
                slot=slot,
                run_id=run_id,
                lease_expired_at=lease,
            )
            records.append(
                await self._run(entry, slot, "reclaimed", as_of=slot, run_id=run_id, claimed=True)
            )
        return records

    def _record_outcome(
        self,
        entry: _Entry,
        result: str,
        summary: Any,
        error: str | None,
        duration: float | None,
    ) -> None:
        stats = entry.stats
        stats.runs += 1
        if result == "failed":
            stats.failed += 1
        elif result == "timeout":
            stats.timed_out += 1
        elif result == "cancelled":
            stats.cancelled += 1
        stats.last_result = result
        stats.last_summary = summary
        stats.last_error = error
        stats.last_duration_seconds = duration
        self._metrics.runs.labels(schedule=entry.spec.name, result=result).inc()

    async def _execute(
        self, entry: _Entry, as_of: datetime, run_id: str
    ) -> tuple[str, object, str | None]:
        """Run the handler under its max duration; never raises for what the handler does."""
        spec = entry.spec
        task: asyncio.Task[object] = asyncio.create_task(
            _invoke(spec.handler, as_of), name=f"timer:{spec.name}:{run_id}"
        )
        entry.current = task
        deadline = asyncio.create_task(
            self._sleeper.sleep_until(self._clock.now() + spec.max_duration)
        )
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
            entry.current = None
        if not task.done():
            task.cancel()
            # Wait for the cancellation to unwind so the handler's transaction rolls back.
            await asyncio.wait({task})
            _log(
                logging.ERROR,
                "timer_run_timeout",
                schedule=spec.name,
                run_id=run_id,
                max_duration=spec.max_duration.total_seconds(),
            )
            return "timeout", None, f"exceeded max duration {spec.max_duration.total_seconds():g}s"
        if task.cancelled():
            return "cancelled", None, "cancelled (shutdown)"
        exc = task.exception()
        if exc is not None:
            _log(logging.ERROR, "timer_run_failed", schedule=spec.name, run_id=run_id, exc_info=exc)
            return "failed", None, f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]
        return "ok", task.result(), None

    # -- visibility --------------------------------------------------------------------------

    def list(self) -> builtins.list[dict[str, Any]]:
        """Every schedule as a plain JSON-able dict (for the web view)."""
        now = self._clock.now()
        out: list[dict[str, Any]] = []
        for entry in self._entries.values():
            spec, stats = entry.spec, entry.stats
            cadence = spec.cadence
            next_at = None
            if spec.enabled:
                next_at = slots.next_fire(cadence, entry.horizon or now)
                if entry.wake_at is not None and entry.wake_at < next_at:
                    next_at = entry.wake_at
            out.append(
                {
                    "name": spec.name,
                    "mode": spec.mode.value,
                    "enabled": spec.enabled,
                    "interval_seconds": (
                        cadence.interval.total_seconds() if cadence.interval is not None else None
                    ),
                    "cron": cadence.cron,
                    "timezone": (cadence.timezone or "UTC") if cadence.cron else None,
                    "misfire": spec.misfire.value,
                    "catch_up_window_seconds": (
                        spec.catch_up_window.total_seconds() if spec.catch_up_window else None
                    ),
                    "misfire_grace_seconds": spec.misfire_grace.total_seconds(),
                    "max_duration_seconds": spec.max_duration.total_seconds(),
                    "running": entry.current is not None,
                    "next_fire_at": _iso(next_at),
                    "last_slot": _iso(stats.last_slot),
                    "last_started_at": _iso(stats.last_started_at),
                    "last_duration_seconds": stats.last_duration_seconds,
                    "last_result": stats.last_result,
                    "last_summary": stats.last_summary,
                    "last_error": stats.last_error,
                    "last_run_id": stats.last_run_id,
                    "counts": {
                        "runs": stats.runs,
                        "failed": stats.failed,
                        "timed_out": stats.timed_out,
                        "cancelled": stats.cancelled,
                        "skipped_overlap": stats.skipped_overlap,
                        "deduped": stats.deduped,
                        "missed": stats.missed,
                        "wakes": stats.wakes,
                        "claim_retries": stats.claim_retries,
                        "reclaimed": stats.reclaimed,
                        "lease_lost": stats.lease_lost,
                    },
                }
            )
        return out


async def _invoke(handler: Handler, as_of: datetime) -> object:
    return await handler.run_once(as_of)
