"""The world the state machines drive: the true clock (the database's time, the model's
truth), simulated workers (each a real runtime and a real timer registry with every slice's
schedules, on a clock of its own), a fast reset of the database between examples, and what
the machines observe (outbox records, timer runs).

Everything a rule does goes through production code: the appliers of the input agents, the
registry's claim/run path, the console's ``perform``, ``timers pause|resume``. The outbox table
is the output: an integration event exists once its outbox row is written.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import asyncpg
from hypothesis import HealthCheck, settings
from prometheus_client import CollectorRegistry

from db import timer_pauses
from db.connector import transaction
from db.timers import TimerRepository
from streams import slices
from streams.clock import Clock, DatabaseClock, ManualClock
from streams.console.perform import Done, lookup, perform
from streams.maintenance.schedules import maintenance_schedules
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.slice import TimerContext, install_timers
from streams.timers import TimerRegistry
from streams.timers.context import RunContext
from streams.timers.metrics import TimerMetrics
from streams.timers.retries import HandBack
from streams.timers.runs import RunRecord
from streams.timers.schedule import Schedule
from tests.integration.state_machines.automation_model import BU

T = TypeVar("T")

# The model's time starts here (a Tuesday, 08:00 UTC).
T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)

# --- settings: a CI profile, and a long one chosen by STATE_MACHINE_EXAMPLES -----------------

CI_EXAMPLES = 60
EXAMPLES = int(os.environ.get("STATE_MACHINE_EXAMPLES", CI_EXAMPLES))
LONG = EXAMPLES > CI_EXAMPLES
# pytest-timeout's limit per test: none for a long run.
TIMEOUT = 0 if LONG else 600
STEPS = int(os.environ.get("STATE_MACHINE_STEPS", 40))


def machine_settings(examples: int = EXAMPLES) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=STEPS,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )


# Examples run per test (printed in pytest's summary by this package's conftest).
EXAMPLES_RUN: dict[str, int] = {}


def count_example(test: str) -> None:
    EXAMPLES_RUN[test] = EXAMPLES_RUN.get(test, 0) + 1


# --- clocks -----------------------------------------------------------------------------------


class SkewedClock:
    """A worker's local clock: the true time plus a fixed error."""

    def __init__(self, true: ManualClock, skew: timedelta) -> None:
        self._true = true
        self.skew = skew

    def now(self) -> datetime:
        return self._true.now() + self.skew

    def monotonic(self) -> float:
        return self._true.monotonic()


class ClockSlot:
    """The clock a worker's runtime (kept across examples, with its pool) reads: the clock of
    the example running now."""

    def __init__(self) -> None:
        self.clock: Clock | None = None

    def now(self) -> datetime:
        assert self.clock is not None
        return self.clock.now()

    def monotonic(self) -> float:
        assert self.clock is not None
        return self.clock.monotonic()


def worker_clock(true_clock: ManualClock, skew: timedelta) -> Clock:
    """The clock of one simulated worker, and so the ``as_of`` of its timers, runners, inputs
    and console actions: the ONE place the machines build it.

    Production's clock (``DatabaseClock``) over the worker's own clock, which is ``skew`` off
    the true time, after one reading of the database's time; here the database's time is the
    machine's true clock (``streams/clock_sync.py`` reads PostgreSQL's in a worker)."""
    local = SkewedClock(true_clock, skew)
    clock = DatabaseClock(local)
    mono = local.monotonic()
    clock.observe(true_clock.now(), mono, mono, local.now())
    return clock


# --- one simulated worker -----------------------------------------------------------------


class Faults:
    """Faults armed by the machine: the next run of a schedule fails or hands its slot back."""

    def __init__(self) -> None:
        self.armed: dict[str, str] = {}

    def wrap(self, schedule: Schedule) -> Schedule:
        return replace(schedule, handler=_Faulty(schedule.name, schedule.handler, self))


@dataclass
class _Faulty:
    name: str
    inner: Any
    faults: Faults

    async def run_once(self, ctx: RunContext) -> Any:
        fault = self.faults.armed.pop(self.name, None)
        if fault == "fail":
            raise RuntimeError("injected failure")
        if fault == "handback":
            raise HandBack("injected hand-back")
        return await self.inner.run_once(ctx)


class FaultyRegistry(TimerRegistry):
    """The production registry; each handler declared on it can be made to fail once."""

    def __init__(self, faults: Faults, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.faults = faults

    def register_all(self, schedules: Iterable[Schedule]) -> list[Any]:
        return super().register_all([self.faults.wrap(s) for s in schedules])


@dataclass
class Run:
    """A timer run that ended on a worker, and the true time it ended at."""

    worker: str
    record: RunRecord
    at: datetime


@dataclass
class Shared:
    """What a test's examples share: the loop, the database, an observer's pool and one
    runtime (with its pool) per simulated worker, whose clock each example sets."""

    loop: Loop
    url: str
    pool: asyncpg.Pool
    runtimes: list[Runtime]

    @classmethod
    def open(cls, loop: Loop, url: str, pool: asyncpg.Pool, workers: int = 2) -> Shared:
        settings = Settings(
            database_url=url,
            db_pool_min_size=0,
            db_pool_max_size=4,
            automation_reconcile_units=str(BU),
        )
        return cls(loop, url, pool, [Runtime(settings, clock=ClockSlot()) for _ in range(workers)])

    def close(self) -> None:
        for runtime in self.runtimes:
            self.loop.run(runtime.close())


class Worker:
    """One simulated worker: its runtime, and a fresh registry with every schedule of
    ``slice_names`` and the maintenance jobs, as the worker's timer side builds them."""

    def __init__(
        self,
        name: str,
        runtime: Runtime,
        true_clock: ManualClock,
        skew: timedelta,
        env: dict[str, str],
        slice_names: Sequence[str],
        runs: list[Run],
    ) -> None:
        self.name = name
        self.skew = skew
        self.clock = worker_clock(true_clock, skew)
        assert isinstance(runtime.clock, ClockSlot)
        runtime.clock.clock = self.clock
        self.runtime = runtime
        store = TimerRepository(open_db=self.runtime.pool)
        self.faults = Faults()
        self.registry = FaultyRegistry(
            self.faults,
            store=store,
            clock=self.clock,
            metrics=TimerMetrics(CollectorRegistry()),
            environ=env,
            worker_id=name,
            pauses=store,
        )
        self.registry.register_all(maintenance_schedules(self.runtime, store, name))
        self.timers = TimerContext(self.runtime, self.registry)
        install_timers(slices.declared(slice_names), self.timers)
        self.registry.on_run_finished(lambda r: runs.append(Run(name, r, true_clock.now())))

    def installed(self, slice_name: str) -> Any:
        return self.timers.installed[slice_name]

    async def run_timers(self, wake: Iterable[str]) -> list[RunRecord]:
        """What the worker's loops would do now: the woken every-instance schedules run (as the
        inputs' and the runners' own wake-ups ask), and every slot due is run or claimed."""
        for name in wake:
            self.registry.wake(name)
        return await self.registry.run_due()


# --- the database -------------------------------------------------------------------------

_SCHEMAS = ("calendar", "automation", "profile", "ops")


async def reset(pool: asyncpg.Pool) -> None:
    """Every table of the product's schemas emptied, the migrations' bookkeeping kept, tables
    that others reference last. Measured on the dev stack: DELETE of these few rows 22 ms,
    TRUNCATE of the same tables 220 ms, a new database from the template 730 ms."""
    tables = await pool.fetch(
        "SELECT format('%I.%I', t.schemaname, t.tablename) AS t, EXISTS ("
        "  SELECT 1 FROM pg_constraint c WHERE c.contype = 'f' AND c.confrelid = "
        "  format('%I.%I', t.schemaname, t.tablename)::regclass) AS referenced "
        "FROM pg_tables t WHERE t.schemaname = ANY($1::text[]) "
        "AND t.tablename NOT LIKE 'schema_migrations%' ORDER BY 2, 1",
        list(_SCHEMAS),
    )
    async with pool.acquire() as conn, conn.transaction():
        for r in tables:
            await conn.execute(f"DELETE FROM {r['t']}")


@dataclass
class Record:
    """An outbox record as the machines see it: the true time it was first seen written."""

    id: int
    topic: str
    key: str
    payload: dict[str, Any]
    at: datetime


@dataclass
class Outbox:
    """Every outbox record written so far (retention may delete rows; the model keeps them)."""

    records: list[Record] = field(default_factory=list)
    last_id: int = 0

    async def observe(self, pool: asyncpg.Pool, now: datetime) -> list[Record]:
        rows = await pool.fetch(
            "SELECT id, topic, key, payload FROM ops.outbox WHERE id > $1 ORDER BY id",
            self.last_id,
        )
        new = [Record(r["id"], r["topic"], r["key"], _json(r["payload"]), now) for r in rows]
        if new:
            self.last_id = new[-1].id
            self.records += new
        return new


def _json(value: Any) -> dict[str, Any]:
    found = json.loads(value) if isinstance(value, str) else value
    assert isinstance(found, dict)
    return found


# --- operators ----------------------------------------------------------------------------


async def console(worker: Worker, listing: str, action: str, target: str, request: int) -> Done:
    """One console action as the web console and the CLI run it, on ``worker`` (its clock)."""
    pool = await worker.runtime.pool()
    return await perform(
        pool,
        lookup(listing, action),
        target,
        "operator",
        f"state machine request {request}",
        worker.clock.now(),
        # The same request sent again carries its id (the form's hidden field, the CLI's).
        request_id=f"state-machine-{request}",
    )


async def set_pause(worker: Worker, schedule: str, paused: bool) -> str:
    """``streams timers pause NAME`` / ``resume NAME``: the flag every registry reads."""
    pool = await worker.runtime.pool()
    change = timer_pauses.pause if paused else timer_pauses.resume
    async with transaction(pool) as conn:
        outcome = await change(conn, schedule, "operator", "state machine", worker.clock.now())
    return outcome.outcome


# --- running async code from hypothesis' synchronous rules ----------------------------------


class Loop:
    """One event loop for a whole test: pools live on it across examples."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Awaitable[T]) -> T:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.loop.close()


def later(now: datetime, seconds: float) -> datetime:
    return now + timedelta(seconds=seconds)
