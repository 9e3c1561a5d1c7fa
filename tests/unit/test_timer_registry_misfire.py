"""Timer registry on virtual time: misfire policies after downtime, catch-up windows and grace."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devkit.harness.timer_fakes import FakeSleeper, InMemoryTimerStore
from devkit.harness.timers import (
    MINUTE,
    T0,
    Recorder,
    World,
    at,
    counts,
    sched,
)
from streams.clock import ManualClock
from streams.timers import (
    Misfire,
    Mode,
    TimerRegistry,
)


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
    assert world.sample("reminders_timer_missed_slots_total", schedule="job") == 5
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
    lateness = world.sample("reminders_timer_start_lateness_seconds_sum", schedule="job")
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
