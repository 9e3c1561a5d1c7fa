"""The timer registry on virtual time: handlers that record, block, take time or fail, a store
whose claims fail, and one world of clock, sleeper, store and metrics registry."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from devkit.harness.timer_fakes import FakeSleeper, InMemoryTimerStore
from streams.clock import ManualClock
from streams.timers import Mode, Schedule, TimerMetrics, TimerRegistry
from streams.timers.context import RunContext

MINUTE = timedelta(minutes=1)
# A minute boundary: slots of a 60 s interval are T0 + k minutes.
T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[datetime] = []

    async def run_once(self, ctx: RunContext) -> dict[str, int]:
        self.calls.append(ctx.as_of)
        return {"handled": len(self.calls)}


class Slow:
    """Takes ``duration`` of virtual time and tracks how many runs are in flight at once."""

    def __init__(self, sleeper: FakeSleeper, duration: timedelta) -> None:
        self.sleeper = sleeper
        self.duration = duration
        self.calls: list[datetime] = []
        self.active = 0
        self.max_active = 0
        self.cancelled = 0

    async def run_once(self, ctx: RunContext) -> None:
        self.calls.append(ctx.as_of)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            await self.sleeper.sleep_until(self.sleeper.clock.now() + self.duration)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.active -= 1


class Gate:
    """Blocks until released; tells the test when a run has started."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.calls: list[datetime] = []
        self.active = 0
        self.max_active = 0
        self.cancelled = False
        self.finished = False

    async def run_once(self, ctx: RunContext) -> str:
        self.calls.append(ctx.as_of)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        finally:
            self.active -= 1
        self.finished = True
        return "done"


class Flaky:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[datetime] = []

    async def run_once(self, ctx: RunContext) -> str:
        self.calls.append(ctx.as_of)
        if len(self.calls) <= self.failures:
            raise RuntimeError("boom")
        return "ok"


@dataclass
class World:
    clock: ManualClock
    sleeper: FakeSleeper
    store: InMemoryTimerStore
    prom: CollectorRegistry

    def registry(self, worker_id: str = "w1", env: dict[str, str] | None = None) -> TimerRegistry:
        return TimerRegistry(
            store=self.store,
            clock=self.clock,
            sleeper=self.sleeper,
            metrics=TimerMetrics(CollectorRegistry()) if worker_id != "w1" else self.metrics,
            environ=env or {},
            worker_id=worker_id,
        )

    @property
    def metrics(self) -> TimerMetrics:
        if not hasattr(self, "_metrics"):
            self._metrics = TimerMetrics(self.prom)
        return self._metrics

    def sample(self, name: str, **labels: str) -> float:
        value = self.prom.get_sample_value(name, labels)
        return 0.0 if value is None else value


def sched(handler: Any, **overrides: Any) -> Schedule:
    base = Schedule(
        name="job",
        interval=MINUTE,
        handler=handler,
        max_duration=timedelta(seconds=30),
        mode=Mode.EVERY_INSTANCE,
    )
    return replace(base, **overrides)


def counts(reg: TimerRegistry, name: str = "job") -> dict[str, int]:
    [row] = [r for r in reg.list() if r["name"] == name]
    result: dict[str, int] = row["counts"]
    return result


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


class FailingClaims(InMemoryTimerStore):
    """Claims raise (PostgreSQL unavailable) ``failures`` times, then work."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def claim_slot(self, *args: Any, **kwargs: Any) -> bool:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("db down")
        return await super().claim_slot(*args, **kwargs)


def new_world() -> World:
    clock = ManualClock(T0 + timedelta(seconds=1))
    return World(clock, FakeSleeper(clock), InMemoryTimerStore(), CollectorRegistry())
