"""Timer registry on virtual time: no run overlaps itself; skipped ticks, catch-up, wake-ups."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from devkit.harness.timer_fakes import quiescent
from devkit.harness.timers import (
    MINUTE,
    T0,
    Gate,
    Recorder,
    Slow,
    World,
    at,
    counts,
    sched,
)
from streams.timers import (
    Misfire,
    Mode,
)


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
    assert world.sample("reminders_timer_overlap_skips_total", schedule="job") == 6
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
