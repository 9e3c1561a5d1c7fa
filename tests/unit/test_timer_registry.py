"""Timer registry behaviour on virtual time: overlap, cluster-once, misfire, failures, shutdown."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from streams.clock import ManualClock
from streams.maintenance import SlotPruner
from streams.timers import (
    Misfire,
    Mode,
    RunRecord,
    Schedule,
    TimerMetrics,
    TimerRegistry,
)
from streams.timers.context import RunContext
from streams.timers.leases import CLAIM_RETRY_MAX, claim_backoff
from streams.timers.testing import FakeSleeper, InMemoryTimerStore, quiescent

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


@pytest.fixture
def world() -> World:
    clock = ManualClock(T0 + timedelta(seconds=1))
    return World(clock, FakeSleeper(clock), InMemoryTimerStore(), CollectorRegistry())


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


# -- running on schedule -----------------------------------------------------------------------


async def test_every_instance_schedule_runs_each_slot_on_each_worker(world: World) -> None:
    a, b = Recorder(), Recorder()
    reg_a, reg_b = world.registry("w1"), world.registry("w2")
    reg_a.register(sched(a))
    reg_b.register(sched(b))
    await reg_a.start()
    await reg_b.start()
    try:
        await world.sleeper.advance_to(at(10) + timedelta(seconds=1))
    finally:
        await reg_a.stop(timeout=1)
        await reg_b.stop(timeout=1)
    expected = [at(k) for k in range(1, 11)]
    assert a.calls == expected
    assert b.calls == expected


async def test_cluster_once_runs_each_slot_once_across_workers(world: World) -> None:
    handlers = [Recorder() for _ in range(3)]
    registries = [world.registry(f"w{i + 1}") for i in range(3)]
    for reg, handler in zip(registries, handlers, strict=True):
        reg.register(sched(handler, mode=Mode.CLUSTER_ONCE))
        await reg.start()
    try:
        await world.sleeper.advance_to(at(12) + timedelta(seconds=1))
    finally:
        for reg in registries:
            await reg.stop(timeout=1)
    runs = Counter(call for h in handlers for call in h.calls)
    assert sorted(runs) == [at(k) for k in range(1, 13)]
    assert set(runs.values()) == {1}
    assert sum(counts(r)["deduped"] for r in registries) == 2 * 12
    assert world.store.claims.keys() == {("job", at(k)) for k in range(1, 13)}


async def test_cluster_once_burst_steps_split_slots_between_workers(world: World) -> None:
    a, b = Recorder(), Recorder()
    reg_a, reg_b = world.registry("w1"), world.registry("w2")
    reg_a.register(sched(a, mode=Mode.CLUSTER_ONCE))
    reg_b.register(sched(b, mode=Mode.CLUSTER_ONCE))
    await reg_a.run_due()
    await reg_b.run_due()
    for k in range(1, 11):
        world.clock.set(at(k))
        # Alternate who asks first: the first claimant of a slot wins it.
        first, second = (reg_a, reg_b) if k % 2 else (reg_b, reg_a)
        won = await first.run_due()
        lost = await second.run_due()
        assert [r.result for r in won] == ["ok"]
        assert [r.result for r in lost] == ["deduped"]
    assert a.calls == [at(k) for k in range(1, 11, 2)]
    assert b.calls == [at(k) for k in range(2, 11, 2)]
    assert world.sample("timer_slot_dedupes_total", schedule="job") == 5


async def test_cron_schedule_runs_at_its_fire_times(world: World) -> None:
    rec = Recorder()
    reg = world.registry()
    reg.register(sched(rec, interval=None, cron="*/15 * * * *", mode=Mode.CLUSTER_ONCE))
    await reg.start()
    try:
        await world.sleeper.advance_to(at(61))
    finally:
        await reg.stop(timeout=1)
    assert rec.calls == [at(15), at(30), at(45), at(60)]


async def test_first_start_without_history_waits_for_the_next_slot(world: World) -> None:
    rec = Recorder()
    reg = world.registry()
    reg.register(sched(rec))
    assert await reg.run_due() == []
    world.clock.set(at(1))
    [record] = await reg.run_due()
    assert (record.slot, record.as_of, record.kind, record.result) == (
        at(1),
        at(1),
        "on_time",
        "ok",
    )


# -- anti-overlap ------------------------------------------------------------------------------


async def test_slow_handler_never_overlaps_itself_and_skipped_ticks_are_counted(
    world: World,
) -> None:
    slow = Slow(world.sleeper, timedelta(seconds=150))
    reg = world.registry()
    reg.register(
        sched(
            slow,
            mode=Mode.CLUSTER_ONCE,
            max_duration=timedelta(minutes=10),
            misfire_grace=timedelta(seconds=1),
        )
    )
    await reg.start()
    try:
        await world.sleeper.advance_to(at(10) + timedelta(seconds=1))
    finally:
        await reg.stop(timeout=0)
    # Runs start at 1, 4, 7, 10 (each lasts 2.5 min); ticks 2-3, 5-6, 8-9 fire during a run.
    assert slow.calls == [at(1), at(4), at(7), at(10)]
    assert slow.max_active == 1
    assert counts(reg)["skipped_overlap"] == 6
    assert world.sample("timer_overlap_skips_total", schedule="job") == 6
    # Those ticks were more than the grace late when the previous run ended: missed, skipped.
    assert counts(reg)["missed"] == 6


async def test_overrun_with_catch_up_runs_the_skipped_ticks_afterwards_in_order(
    world: World,
) -> None:
    slow = Slow(world.sleeper, timedelta(seconds=150))
    reg = world.registry()
    reg.register(
        sched(
            slow,
            mode=Mode.CLUSTER_ONCE,
            max_duration=timedelta(minutes=10),
            misfire=Misfire.CATCH_UP,
            catch_up_window=timedelta(minutes=30),
            misfire_grace=timedelta(seconds=1),
        )
    )
    await reg.start()
    try:
        await world.sleeper.advance_to(at(9))
    finally:
        await reg.stop(timeout=0)
    assert slow.max_active == 1
    # 1 runs 1:00-3:30, then 2 and 3 (catch-up) back to back, never two at once.
    assert slow.calls[:4] == [at(1), at(2), at(3), at(4)]
    assert counts(reg)["skipped_overlap"] >= 2


async def test_wake_runs_early_and_never_overlaps(world: World) -> None:
    gate = Gate()
    reg = world.registry()
    reg.register(sched(gate))
    await reg.start()
    try:
        reg.wake("job")
        await gate.started.wait()
        assert gate.calls == [world.clock.now()]
        # Wake-ups during the run are served after it, collapsed into one run.
        reg.wake("job")
        reg.wake("job")
        assert reg.finished_runs("job") == 0
        gate.release.set()
        first = await reg.run_finished("job", 1)
        second = await reg.run_finished("job", 2)
        assert (first.kind, second.kind) == ("wake", "wake")
        assert len(gate.calls) == 2
        assert gate.max_active == 1
        # A wake-up for a later instant runs then, not before.
        reg.wake("job", at=world.clock.now() + timedelta(seconds=20))
        await world.sleeper.advance(timedelta(seconds=19))
        assert len(gate.calls) == 2
        await world.sleeper.advance(timedelta(seconds=1))
        assert len(gate.calls) == 3
        assert gate.calls[-1] == T0 + timedelta(seconds=21)
    finally:
        await reg.stop(timeout=1)
    assert counts(reg)["wakes"] == 3
    assert counts(reg)["skipped_overlap"] == 0


async def test_wake_is_only_for_every_instance_schedules(world: World) -> None:
    reg = world.registry()
    reg.register(sched(Recorder(), mode=Mode.CLUSTER_ONCE))
    with pytest.raises(ValueError, match="cluster_once"):
        reg.wake("job")
    with pytest.raises(KeyError, match="nope"):
        reg.wake("nope")


async def test_a_delegated_schedule_runs_elsewhere_and_its_wakes_go_there(world: World) -> None:
    """A worker with a timer process: the isolated schedule has no loop here; wake-ups go to
    the child, the other schedules run as usual."""
    here, there = Recorder(), Recorder()
    reg = world.registry()
    reg.register(sched(here, name="local"))
    reg.register(sched(there, name="isolated", isolated=True))
    assert reg.get("isolated").isolated and not reg.get("local").isolated
    forwarded: list[tuple[str, datetime | None]] = []
    reg.delegate(["isolated"], lambda name, at: forwarded.append((name, at)))
    await reg.start()
    try:
        started = world.clock.now()
        later = started + timedelta(seconds=5)
        reg.wake("isolated", at=later)
        reg.wake("local")
        await world.sleeper.advance(2 * MINUTE)
        assert forwarded == [("isolated", later)]
        assert there.calls == []  # never run in this process, not even on its interval
        assert here.calls[0] == started
        with pytest.raises(RuntimeError, match="before start"):
            reg.delegate(["local"], lambda name, at: None)
    finally:
        await reg.stop(timeout=1)


async def test_every_turn_of_a_loop_reports_when_its_next_turn_is_due(world: World) -> None:
    """The timer process's watch: a waiting loop promises its next turn by the end of its wait,
    a running one by the run's max duration; a loop stuck in a run makes no new promise."""
    gate = Gate()
    turns: list[tuple[str, float]] = []
    reg = world.registry()
    reg.register(sched(gate))  # every minute, max duration 30 s; the clock is at T0 + 1 s
    reg.report_turns(lambda name, within: turns.append((name, within)))
    await reg.start()
    try:
        await quiescent()
        assert turns == [("job", 59.0)]  # waits for the slot at T0 + 1 min
        await world.sleeper.advance(timedelta(seconds=59))
        assert gate.started.is_set()
        assert turns[1:] == [("job", 30.0)]  # the wait ended: it runs (max duration 30 s)
        await world.sleeper.advance(timedelta(seconds=20))
        assert len(turns) == 2  # still in the run: nothing new to promise
        gate.release.set()
        await reg.run_finished("job", 1)
        await quiescent()
        assert turns[2:] == [("job", 40.0)]  # back to waiting, for T0 + 2 min
        with pytest.raises(RuntimeError, match="before start"):
            reg.report_turns(lambda name, within: None)
    finally:
        await reg.stop(timeout=1)


async def test_the_timer_process_keeps_only_its_schedules(world: World) -> None:
    mine, theirs = Recorder(), Recorder()
    reg = world.registry()
    reg.register(sched(mine, name="isolated", isolated=True))
    reg.register(sched(theirs, name="local"))

    def elsewhere(name: str, at: datetime | None) -> None:
        raise ValueError(f"{name} does not run in this process")

    reg.delegate(["local"], elsewhere)
    await reg.start()
    try:
        reg.wake("isolated")
        await reg.run_finished("isolated", 1)
        assert mine.calls == [world.clock.now()]
        with pytest.raises(ValueError, match="does not run in this process"):
            reg.wake("local")
        await world.sleeper.advance(2 * MINUTE)
        assert theirs.calls == []
    finally:
        await reg.stop(timeout=1)


# -- misfire -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "window", "expected"),
    [
        (Misfire.SKIP, None, []),
        (Misfire.CATCH_UP, timedelta(minutes=10), [1, 2, 3, 4, 5]),
        (Misfire.COALESCE, None, [5]),
    ],
)
@pytest.mark.parametrize("mode", [Mode.EVERY_INSTANCE, Mode.CLUSTER_ONCE])
async def test_misfire_after_five_slots_of_downtime(
    world: World,
    policy: Misfire,
    window: timedelta | None,
    expected: list[int],
    mode: Mode,
) -> None:
    # The last run before the downtime was slot 0; the worker comes back at 5:45, when
    # slots 1-5 have passed and slot 5 is beyond the 30 s grace.
    await world.store.advance_state("job", at(0), "old-worker")
    world.clock.set(at(5.75))
    rec = Recorder()
    reg = world.registry()
    reg.register(sched(rec, mode=mode, misfire=policy, catch_up_window=window))
    records = await reg.run_due()
    assert rec.calls == [at(k) for k in expected]
    assert all(r.result == "ok" for r in records)
    assert counts(reg)["missed"] == 5
    assert world.sample("timer_missed_slots_total", schedule="job") == 5
    # Whatever the policy, the next slot runs on time.
    world.clock.set(at(6))
    [record] = await reg.run_due()
    assert (record.slot, record.kind) == (at(6), "on_time")


async def test_catch_up_runs_only_slots_within_its_window(world: World) -> None:
    await world.store.advance_state("job", at(0), "old-worker")
    world.clock.set(at(5.75))
    rec = Recorder()
    reg = world.registry()
    reg.register(sched(rec, misfire=Misfire.CATCH_UP, catch_up_window=timedelta(minutes=3)))
    records = await reg.run_due()
    assert rec.calls == [at(3), at(4), at(5)]
    assert [r.kind for r in records] == ["catch_up"] * 3
    assert counts(reg)["missed"] == 5


async def test_a_late_start_within_grace_is_on_time_not_missed(world: World) -> None:
    await world.store.advance_state("job", at(0), "old-worker")
    world.clock.set(at(1) + timedelta(seconds=20))
    rec = Recorder()
    reg = world.registry()
    reg.register(sched(rec))
    [record] = await reg.run_due()
    assert (record.kind, record.slot) == ("on_time", at(1))
    assert counts(reg)["missed"] == 0
    lateness = world.sample("timer_start_lateness_seconds_sum", schedule="job")
    assert lateness == 20


async def test_missed_slots_of_a_cluster_once_catch_up_run_once(world: World) -> None:
    await world.store.advance_state("job", at(0), "old-worker")
    world.clock.set(at(5.75))
    recs = [Recorder(), Recorder()]
    regs = [world.registry("w1"), world.registry("w2")]
    for reg, rec in zip(regs, recs, strict=True):
        reg.register(
            sched(
                rec,
                mode=Mode.CLUSTER_ONCE,
                misfire=Misfire.CATCH_UP,
                catch_up_window=timedelta(minutes=10),
            )
        )
    await asyncio.gather(*(r.run_due() for r in regs))
    assert sorted(recs[0].calls + recs[1].calls) == [at(k) for k in range(1, 6)]


@settings(max_examples=40, deadline=None, database=None)
@given(
    downtime=st.integers(min_value=0, max_value=40),
    policy=st.sampled_from(list(Misfire)),
    window_slots=st.integers(min_value=1, max_value=50),
)
def test_misfire_invariants(downtime: int, policy: Misfire, window_slots: int) -> None:
    async def scenario() -> tuple[list[datetime], int]:
        clock = ManualClock(T0)
        store = InMemoryTimerStore()
        await store.advance_state("job", at(0), "old")
        clock.set(at(downtime + 0.75))
        rec = Recorder()
        reg = TimerRegistry(store=store, clock=clock, sleeper=FakeSleeper(clock), environ={})
        window = MINUTE * window_slots + timedelta(seconds=1)
        reg.register(
            sched(
                rec, misfire=policy, catch_up_window=window if policy is Misfire.CATCH_UP else None
            )
        )
        await reg.run_due()
        return rec.calls, counts(reg)["missed"]

    calls, missed = asyncio.run(scenario())
    assert missed == downtime
    assert calls == sorted(set(calls))
    assert all(at(0) < c <= at(downtime) for c in calls)
    if policy is Misfire.SKIP:
        assert calls == []
    elif policy is Misfire.COALESCE:
        assert calls == ([at(downtime)] if downtime else [])
    else:
        assert len(calls) == min(downtime, window_slots)
        assert calls == [at(k) for k in range(downtime - len(calls) + 1, downtime + 1)]


# -- safety ------------------------------------------------------------------------------------


async def test_a_handler_that_raises_is_logged_and_the_next_tick_runs(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    flaky = Flaky(failures=1)
    reg = world.registry()
    reg.register(sched(flaky))
    caplog.set_level(logging.INFO, logger="streams.timers")
    await reg.start()
    try:
        await world.sleeper.advance_to(at(1))
        [row] = reg.list()
        assert row["last_result"] == "failed"
        assert row["last_error"] == "RuntimeError"
        failed_run = row["last_run_id"]
        await world.sleeper.advance_to(at(2))
    finally:
        await reg.stop(timeout=1)
    assert flaky.calls == [at(1), at(2)]
    [row] = reg.list()
    assert row["last_result"] == "ok"
    assert row["last_error"] is None
    assert row["counts"]["runs"] == 2
    assert row["counts"]["failed"] == 1
    assert world.sample("timer_runs_total", schedule="job", result="failed") == 1
    assert world.sample("timer_runs_total", schedule="job", result="ok") == 1
    failure_logs = [r for r in caplog.records if "action=timer_run_failed" in r.getMessage()]
    assert len(failure_logs) == 1
    assert f"run_id={failed_run}" in failure_logs[0].getMessage()
    assert failure_logs[0].exc_info is not None


async def test_a_run_over_its_max_duration_is_cancelled_and_counted(world: World) -> None:
    slow = Slow(world.sleeper, timedelta(seconds=45))
    reg = world.registry()
    reg.register(sched(slow, max_duration=timedelta(seconds=10)))
    await reg.start()
    try:
        await world.sleeper.advance_to(at(1) + timedelta(seconds=9))
        assert slow.active == 1
        await world.sleeper.advance_to(at(1) + timedelta(seconds=10))
        assert slow.active == 0
        assert slow.cancelled == 1
        await world.sleeper.advance_to(at(2))
        assert slow.calls == [at(1), at(2)]
    finally:
        await reg.stop(timeout=0)
    assert counts(reg)["timed_out"] == 1
    assert world.sample("timer_runs_total", schedule="job", result="timeout") == 1
    durations = world.sample("timer_run_duration_seconds_sum", schedule="job")
    assert durations == 10


async def test_stop_lets_the_current_run_finish_within_the_bound(world: World) -> None:
    gate = Gate()
    reg = world.registry()
    reg.register(sched(gate))
    await reg.start()
    reg.wake("job")
    await gate.started.wait()
    stopping = asyncio.create_task(reg.stop(timeout=5))
    await quiescent()
    assert not stopping.done() and reg.finished_runs("job") == 0
    gate.release.set()
    await stopping
    assert gate.finished and not gate.cancelled
    assert reg.list()[0]["last_result"] == "ok"


async def test_stop_cancels_a_run_that_exceeds_the_bound(world: World) -> None:
    gate = Gate()
    reg = world.registry()
    reg.register(sched(gate))
    await reg.start()
    reg.wake("job")
    await gate.started.wait()
    await reg.stop(timeout=0)
    assert gate.cancelled and not gate.finished
    [row] = reg.list()
    assert row["last_result"] == "cancelled"
    assert row["running"] is False
    assert world.sample("timer_runs_total", schedule="job", result="cancelled") == 1


async def test_a_failing_store_does_not_stop_the_worker(world: World) -> None:
    class BrokenStore(InMemoryTimerStore):
        async def claim_slot(self, *args: Any, **kwargs: Any) -> bool:
            raise ConnectionError("db down")

    rec = Recorder()
    reg = TimerRegistry(store=BrokenStore(), clock=world.clock, sleeper=world.sleeper, environ={})
    reg.register(sched(rec, mode=Mode.CLUSTER_ONCE))
    await reg.start()
    try:
        await world.sleeper.advance_to(at(2))
    finally:
        await reg.stop(timeout=0)
    assert rec.calls == []
    [row] = reg.list()
    # Slot 1: claimed at 0 s, then retried 1, 3, 7, 15 and 31 s after it (backoff); at 31 s it
    # is past its 30 s grace, so the skip policy drops it (one missed slot). Slot 2: once.
    assert row["counts"]["failed"] == 6
    assert row["counts"]["claim_retries"] == 6
    assert row["counts"]["missed"] == 1
    assert row["last_error"] == "slot claim failed: ConnectionError"


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


async def test_a_failed_claim_is_retried_and_the_slot_runs(world: World) -> None:
    store = FailingClaims(1)
    rec = Recorder()
    reg = TimerRegistry(store=store, clock=world.clock, sleeper=world.sleeper, environ={})
    reg.register(sched(rec, mode=Mode.CLUSTER_ONCE))
    await reg.start()
    try:
        await world.sleeper.advance_to(at(1) + timedelta(seconds=5))
    finally:
        await reg.stop(timeout=0)
    # Claimed at 12:01:00 (failed), again 1 s later (won): the slot ran, on time.
    assert rec.calls == [at(1)]
    assert store.finished == {("job", at(1)): "ok"}
    assert counts(reg)["claim_retries"] == 1
    assert counts(reg)["missed"] == 0


def test_claim_backoff_doubles_and_is_capped_even_after_a_long_outage() -> None:
    assert [claim_backoff(n).total_seconds() for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert claim_backoff(3, first=timedelta(milliseconds=100)) == timedelta(milliseconds=400)
    # Hours of consecutive failures must not overflow timedelta.
    assert claim_backoff(10_000) == CLAIM_RETRY_MAX


@pytest.mark.parametrize(
    ("policy", "window", "runs", "kind"),
    [
        (Misfire.SKIP, None, [], None),
        (Misfire.CATCH_UP, timedelta(minutes=5), [1], "catch_up"),
        (Misfire.COALESCE, None, [1], "coalesced"),
    ],
)
async def test_a_slot_whose_claim_failed_is_subject_to_the_misfire_policy(
    world: World, policy: Misfire, window: timedelta | None, runs: list[int], kind: str | None
) -> None:
    store = FailingClaims(1)
    rec = Recorder()
    reg = TimerRegistry(store=store, clock=world.clock, metrics=world.metrics, environ={})
    reg.register(sched(rec, mode=Mode.CLUSTER_ONCE, misfire=policy, catch_up_window=window))
    await reg.run_due()
    world.clock.set(at(1))
    [failed] = await reg.run_due()
    assert (failed.slot, failed.result) == (at(1), "failed")
    # The next step comes after the grace (30 s): the slot is a missed one now.
    world.clock.set(at(1) + timedelta(seconds=45))
    records = await reg.run_due()
    assert rec.calls == [at(k) for k in runs]
    assert [(r.slot, r.kind) for r in records] == [(at(k), kind) for k in runs]
    assert counts(reg)["missed"] == 1
    assert world.sample("timer_missed_slots_total", schedule="job") == 1
    # The next slot is planned as usual.
    world.clock.set(at(2))
    [record] = await reg.run_due()
    assert (record.slot, record.kind, record.result) == (at(2), "on_time", "ok")


async def test_catch_up_slots_after_a_failed_claim_are_counted_missed_once(world: World) -> None:
    await world.store.advance_state("job", at(0), "old-worker")
    store = FailingClaims(1)
    store.state = dict(world.store.state)
    world.clock.set(at(3.75))
    rec = Recorder()
    reg = TimerRegistry(store=store, clock=world.clock, environ={})
    reg.register(
        sched(
            rec,
            mode=Mode.CLUSTER_ONCE,
            misfire=Misfire.CATCH_UP,
            catch_up_window=timedelta(minutes=10),
        )
    )
    [failed] = await reg.run_due()  # slots 1..3 missed; the claim of slot 1 fails
    assert (failed.slot, failed.result) == (at(1), "failed")
    world.clock.set(at(3.75) + timedelta(seconds=2))
    records = await reg.run_due()
    assert [(r.slot, r.result) for r in records] == [(at(k), "ok") for k in (1, 2, 3)]
    assert counts(reg)["missed"] == 3


# -- leases: a claimant that died or stalled mid-run ---------------------------------------------


async def test_a_slot_whose_claimant_died_is_taken_over_when_its_lease_runs_out(
    world: World,
) -> None:
    rec = Recorder()
    reg = world.registry("w2")
    reg.register(sched(rec, mode=Mode.CLUSTER_ONCE, max_duration=timedelta(seconds=20)))
    await reg.start()
    try:
        await world.sleeper.advance_to(at(1) - timedelta(seconds=1))
        # w1 claims slot 1 first (lease: 20 s max duration + 10 s margin) and is killed.
        assert await world.store.claim_slot(
            "job", at(1), "w1", "dead", at(1) + timedelta(seconds=30)
        )
        await world.sleeper.advance_to(at(1) + timedelta(seconds=29))
        assert rec.calls == []
        assert counts(reg)["deduped"] == 1
        await world.sleeper.advance_to(at(1) + timedelta(seconds=31))
        assert rec.calls == [at(1)]
    finally:
        await reg.stop(timeout=1)
    claim = world.store.slots[("job", at(1))]
    assert (claim.claimed_by, claim.result, claim.takeovers) == ("w2", "ok", 1)
    assert counts(reg)["reclaimed"] == 1
    [row] = reg.list()
    assert row["last_slot"] == "2025-01-06T12:01:00Z"
    # The dead claimant's finish, should it come, changes nothing.
    assert not await world.store.finish_slot("job", at(1), "dead", "ok", 1.0)
    assert world.store.slots[("job", at(1))].claimed_by == "w2"


class Stalled:
    """Ignores cancellation for ``stall`` of virtual time, as a paused process would."""

    def __init__(self, sleeper: FakeSleeper, stall: timedelta) -> None:
        self.sleeper = sleeper
        self.stall = stall
        self.calls: list[datetime] = []

    async def run_once(self, ctx: RunContext) -> str:
        self.calls.append(ctx.as_of)
        try:
            await self.sleeper.sleep_until(self.sleeper.clock.now() + timedelta(hours=1))
        except asyncio.CancelledError:
            await self.sleeper.sleep_until(self.sleeper.clock.now() + self.stall)
        return "late"


async def test_a_stalled_holder_loses_its_slot_and_its_finish_is_fenced(world: World) -> None:
    stalled = Stalled(world.sleeper, timedelta(minutes=5))
    rec = Recorder()
    reg_a, reg_b = world.registry("w1"), world.registry("w2")
    reg_a.register(sched(stalled, mode=Mode.CLUSTER_ONCE, max_duration=timedelta(seconds=20)))
    reg_b.register(sched(rec, mode=Mode.CLUSTER_ONCE, max_duration=timedelta(seconds=20)))
    await reg_a.start()
    await world.sleeper.advance_to(at(1) - timedelta(seconds=1))
    await reg_b.start()
    try:
        await world.sleeper.advance_to(at(1) + timedelta(seconds=31))
        # w1 won the slot, stalled past its lease (30 s); w2 took it over and ran it.
        assert stalled.calls == [at(1)] and rec.calls == [at(1)]
        assert world.store.slots[("job", at(1))].claimed_by == "w2"
        await world.sleeper.advance_to(at(1) + timedelta(minutes=6))
    finally:
        await reg_a.stop(timeout=1)
        await reg_b.stop(timeout=1)
    claim = world.store.slots[("job", at(1))]
    assert (claim.claimed_by, claim.result) == ("w2", "ok")
    assert counts(reg_a)["lease_lost"] == 1 and counts(reg_b)["reclaimed"] == 1


async def test_an_unfinished_slot_older_than_the_latest_is_not_replayed_under_skip(
    world: World,
) -> None:
    rec = Recorder()
    await world.store.claim_slot("job", at(1), "w1", "dead", at(1) + timedelta(seconds=30))
    await world.store.advance_state("job", at(1), "w1")
    world.clock.set(at(2) + timedelta(seconds=5))
    reg = world.registry("w2")
    reg.register(sched(rec, mode=Mode.CLUSTER_ONCE))
    records = await reg.run_due()
    # Slot 2 runs on time; slot 1 (died mid-run) is older than the latest slot: skip.
    assert [(r.slot, r.kind) for r in records] == [(at(2), "on_time")]
    assert world.store.slots[("job", at(1))].result is None


async def test_catch_up_takes_over_unfinished_slots_within_its_window(world: World) -> None:
    rec = Recorder()
    for k in (1, 2, 3):
        await world.store.claim_slot("job", at(k), "w1", f"dead{k}", at(k) + timedelta(seconds=40))
    await world.store.finish_slot("job", at(2), "dead2", "ok", 1.0)
    await world.store.advance_state("job", at(3), "w1")
    world.clock.set(at(3) + timedelta(seconds=45))
    reg = world.registry("w2")
    reg.register(
        sched(
            rec,
            mode=Mode.CLUSTER_ONCE,
            misfire=Misfire.CATCH_UP,
            catch_up_window=timedelta(minutes=2, seconds=30),
        )
    )
    records = await reg.run_due()
    # Slot 1 is out of the window, slot 2 finished: only slot 3 is taken over.
    assert [(r.slot, r.kind, r.result) for r in records] == [(at(3), "reclaimed", "ok")]
    assert rec.calls == [at(3)]


async def test_takeovers_lost_leases_and_claim_retries_are_counted_in_metrics(
    world: World,
) -> None:
    prom_a, prom_b = CollectorRegistry(), CollectorRegistry()

    def registry(
        worker_id: str, prom: CollectorRegistry, store: InMemoryTimerStore
    ) -> TimerRegistry:
        return TimerRegistry(
            store=store,
            clock=world.clock,
            sleeper=world.sleeper,
            metrics=TimerMetrics(prom),
            environ={},
            worker_id=worker_id,
        )

    def sample(prom: CollectorRegistry, name: str) -> float | None:
        return prom.get_sample_value(name, {"schedule": "job"})

    names = ("timer_slot_takeovers_total", "timer_lease_lost_total", "timer_claim_retries_total")
    stalled = Stalled(world.sleeper, timedelta(minutes=5))
    reg_a, reg_b = registry("w1", prom_a, world.store), registry("w2", prom_b, world.store)
    reg_a.register(sched(stalled, mode=Mode.CLUSTER_ONCE, max_duration=timedelta(seconds=20)))
    reg_b.register(sched(Recorder(), mode=Mode.CLUSTER_ONCE, max_duration=timedelta(seconds=20)))
    # Primed at registration: every series exists at zero.
    assert [sample(p, n) for p in (prom_a, prom_b) for n in names] == [0.0] * 6
    await reg_a.start()
    await world.sleeper.advance_to(at(1) - timedelta(seconds=1))
    await reg_b.start()
    try:
        await world.sleeper.advance_to(at(1) + timedelta(minutes=6))
    finally:
        await reg_a.stop(timeout=1)
        await reg_b.stop(timeout=1)
    # w1 stalled past its lease and lost the slot; w2 took it over.
    assert [sample(prom_a, n) for n in names] == [0.0, 1.0, 0.0]
    assert [sample(prom_b, n) for n in names] == [1.0, 0.0, 0.0]

    prom_c = CollectorRegistry()
    reg_c = registry("w3", prom_c, FailingClaims(2))
    reg_c.register(sched(Recorder(), name="job", mode=Mode.CLUSTER_ONCE))
    await reg_c.run_due()
    world.clock.set(at(10))
    await reg_c.run_due()
    world.clock.set(at(10) + timedelta(seconds=1))
    await reg_c.run_due()
    world.clock.set(at(10) + timedelta(seconds=3))
    [record] = await reg_c.run_due()
    assert (record.slot, record.result) == (at(10), "ok")
    assert [sample(prom_c, n) for n in names] == [0.0, 0.0, 2.0]
    assert counts(reg_c)["claim_retries"] == 2


# -- visibility --------------------------------------------------------------------------------


@dataclass(frozen=True)
class DispatchResult:
    sent: int
    at: datetime


class WithSummary:
    def summary(self) -> dict[str, int]:
        return {"rows": 3}


class Returns:
    def __init__(self, value: object) -> None:
        self.value = value

    async def run_once(self, ctx: RunContext) -> object:
        return self.value


async def test_list_is_json_able_and_complete(world: World) -> None:
    reg = world.registry(env={"TIMER_OFF_ENABLED": "false"})
    reg.register(sched(Returns(DispatchResult(2, T0)), name="dispatch"))
    reg.register(sched(Returns(WithSummary()), name="summary", mode=Mode.CLUSTER_ONCE))
    reg.register(
        sched(
            Returns(object()),
            name="daily",
            interval=None,
            cron="0 3 * * *",
            timezone="Europe/Berlin",
            mode=Mode.CLUSTER_ONCE,
            misfire=Misfire.CATCH_UP,
            catch_up_window=timedelta(days=2),
        )
    )
    reg.register(sched(Recorder(), name="off", settings_prefix="TIMER_OFF_"))
    await reg.run_due()
    world.clock.set(at(1))
    await reg.run_due()
    rows = {row["name"]: row for row in json.loads(json.dumps(reg.list()))}
    assert set(rows) == {"dispatch", "summary", "daily", "off"}
    dispatch = rows["dispatch"]
    assert dispatch["mode"] == "every_instance"
    assert dispatch["interval_seconds"] == 60
    assert dispatch["next_fire_at"] == "2025-01-06T12:02:00Z"
    assert dispatch["last_slot"] == "2025-01-06T12:01:00Z"
    assert dispatch["last_started_at"] == "2025-01-06T12:01:00Z"
    assert dispatch["last_duration_seconds"] == 0
    assert dispatch["last_result"] == "ok"
    assert dispatch["last_summary"] == {"sent": 2, "at": "2025-01-06 12:00:00+00:00"}
    assert dispatch["counts"] == {
        "runs": 1,
        "failed": 0,
        "timed_out": 0,
        "cancelled": 0,
        "skipped_overlap": 0,
        "deduped": 0,
        "missed": 0,
        "wakes": 0,
        "claim_retries": 0,
        "reclaimed": 0,
        "lease_lost": 0,
        "retries": 0,
        "handed_back": 0,
        "given_up": 0,
    }
    assert rows["summary"]["last_summary"] == {"rows": 3}
    daily = rows["daily"]
    assert (daily["cron"], daily["timezone"], daily["misfire"]) == (
        "0 3 * * *",
        "Europe/Berlin",
        "catch_up",
    )
    assert daily["next_fire_at"] == "2025-01-07T02:00:00Z"
    assert daily["last_result"] is None
    assert rows["off"]["enabled"] is False
    assert rows["off"]["next_fire_at"] is None


async def test_metrics_series_exist_from_registration(world: World) -> None:
    reg = world.registry()
    reg.register(sched(Recorder()))
    for result in ("ok", "failed", "timeout", "cancelled"):
        assert (
            world.prom.get_sample_value("timer_runs_total", {"schedule": "job", "result": result})
            == 0
        )
    assert world.prom.get_sample_value("timer_overlap_skips_total", {"schedule": "job"}) == 0


async def test_disabled_schedules_do_not_run(world: World) -> None:
    rec = Recorder()
    reg = world.registry(env={"TIMER_JOB_ENABLED": "0"})
    reg.register(sched(rec, settings_prefix="TIMER_JOB_"))
    await reg.start()
    try:
        await world.sleeper.advance_to(at(3))
    finally:
        await reg.stop(timeout=0)
    assert rec.calls == []


async def test_slot_pruner_deletes_old_claims(world: World) -> None:
    for k in range(5):
        await world.store.claim_slot("job", at(k), "w", f"r{k}")
    pruner = SlotPruner(world.store, retention=timedelta(minutes=2), batch=2)
    result = await pruner.run_once(RunContext.at(at(4), clock=world.clock))
    assert result.deleted == 2
    assert sorted(s for _, s in world.store.claims) == [at(2), at(3), at(4)]


def test_run_records_are_plain_data() -> None:
    record = RunRecord("job", "r1", "on_time", T0, T0, "ok")
    assert record.summary is None and record.error is None
