"""The timer handlers' batch loop (streams/timers/drain.py) and the run context it reads."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from streams.clock import ManualClock
from streams.timers.context import RunContext
from streams.timers.drain import drain

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)


class Batches:
    """Batches of ``sizes`` items in turn (then empty ones), each taking ``cost`` seconds on
    the clock."""

    def __init__(self, clock: ManualClock, sizes: list[int], cost: float = 1.0) -> None:
        self.clock, self.sizes, self.cost = clock, list(sizes), cost
        self.calls = 0

    async def __call__(self) -> int:
        self.calls += 1
        self.clock.advance(self.cost)
        return self.sizes.pop(0) if self.sizes else 0


def test_the_context_of_a_direct_call_starts_now_with_its_budget() -> None:
    clock = ManualClock(T0)
    clock.advance(5)
    ctx = RunContext.at(T0, clock=clock, budget=timedelta(seconds=20))
    assert (ctx.started, ctx.deadline, ctx.budget) == (5.0, 25.0, 20.0)
    assert ctx.cutoff(0.1) == pytest.approx(23.0)
    clock.advance(4)
    assert ctx.remaining(clock) == 16.0
    assert ctx.kind == "direct" and ctx.slot is None and not ctx.should_stop()
    assert len(ctx.run_id) == 32 and ctx.run_id != RunContext.at(T0, clock=clock).run_id
    assert RunContext.at(T0, clock=clock, run_id="r1").run_id == "r1"
    with pytest.raises(ValueError):
        RunContext.at(T0, clock=clock, budget=timedelta(0))


async def test_a_short_batch_ends_the_drain() -> None:
    clock = ManualClock(T0)
    batch = Batches(clock, [3, 3, 2, 3])
    done = await drain(RunContext.at(T0, clock=clock), batch, clock=clock, batch_size=3)
    assert batch.calls == 3
    assert (done.batches, done.lanes, done.budget_exhausted, done.cut_short) == (3, 1, False, False)


async def test_no_batch_starts_that_would_end_past_the_cutoff() -> None:
    clock = ManualClock(T0)
    # Budget 10 s, reserve 10 %: the cutoff is at 9 s; batches take 2 s.
    ctx = RunContext.at(T0, clock=clock, budget=timedelta(seconds=10))
    batch = Batches(clock, [3] * 10, cost=2.0)
    done = await drain(ctx, batch, clock=clock, batch_size=3, reserve=0.1)
    # Ends at 2, 4, 6 (6 + 2 < 9 goes on), 8 (8 + 2 >= 9: stop).
    assert batch.calls == 4
    assert done.budget_exhausted and not done.stopped_with_backlog and done.cut_short


async def test_without_lookahead_the_drain_stops_once_past_the_cutoff() -> None:
    clock = ManualClock(T0)
    ctx = RunContext.at(T0, clock=clock, budget=timedelta(seconds=10))
    batch = Batches(clock, [3] * 10, cost=2.0)
    done = await drain(ctx, batch, clock=clock, batch_size=3, reserve=0.1, lookahead=False)
    assert batch.calls == 5  # ends at 10 >= 9
    assert done.budget_exhausted


async def test_without_a_reserve_the_budget_is_left_to_the_registry() -> None:
    clock = ManualClock(T0)
    ctx = RunContext.at(T0, clock=clock, budget=timedelta(seconds=1))
    batch = Batches(clock, [3] * 5, cost=2.0)
    done = await drain(ctx, batch, clock=clock, batch_size=3, reserve=None)
    assert batch.calls == 6 and not done.cut_short


async def test_a_stop_ends_the_drain_after_a_full_batch_with_a_backlog() -> None:
    clock = ManualClock(T0)
    stop = False
    batch = Batches(clock, [3] * 10)

    async def then_stop() -> int:
        nonlocal stop
        n = await batch()
        stop = batch.calls == 2
        return n

    ctx = RunContext.at(T0, clock=clock, budget=timedelta(hours=1), should_stop=lambda: stop)
    done = await drain(ctx, then_stop, clock=clock, batch_size=3)
    assert batch.calls == 2
    assert done.stopped_with_backlog and not done.budget_exhausted and done.cut_short


async def test_a_stop_before_the_first_batch_runs_none_only_when_asked() -> None:
    clock = ManualClock(T0)
    ctx = RunContext.at(T0, clock=clock, should_stop=lambda: True)
    first = Batches(clock, [3, 3])
    assert (await drain(ctx, first, clock=clock, batch_size=3, stop_first=True)).batches == 0
    assert first.calls == 0
    done = await drain(ctx, first, clock=clock, batch_size=3)
    assert first.calls == 1 and done.stopped_with_backlog


async def test_lanes_start_only_after_a_full_batch() -> None:
    clock = ManualClock(T0)
    ctx = RunContext.at(T0, clock=clock)
    short = Batches(clock, [2])
    done = await drain(ctx, short, clock=clock, batch_size=3, lanes=2)
    assert (short.calls, done.lanes) == (1, 1)

    in_flight = peak = 0
    sizes = [3, 3, 3, 1, 0]

    async def overlapping() -> int:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        n = sizes.pop(0) if sizes else 0
        await asyncio.sleep(0)
        in_flight -= 1
        return n

    done = await drain(ctx, overlapping, clock=clock, batch_size=3, lanes=2)
    assert (done.lanes, peak) == (2, 2)
    assert done.batches == 5 and not done.cut_short


async def test_a_failed_lane_fails_the_drain_once_the_other_lanes_have_ended() -> None:
    clock = ManualClock(T0)
    ctx = RunContext.at(T0, clock=clock)
    calls = 0
    release = asyncio.Event()
    other_ended = False

    async def batch() -> int:
        nonlocal calls, other_ended
        calls += 1
        if calls == 1:
            return 3  # full: the second lane starts
        if calls == 2:
            await release.wait()  # the first lane's next batch, still running
            other_ended = True
            return 1
        release.set()
        raise RuntimeError("batch failed")

    with pytest.raises(RuntimeError, match="batch failed"):
        await drain(ctx, batch, clock=clock, batch_size=3, lanes=2)
    # The running batch of the other lane was not cut inside its transaction.
    assert other_ended and calls == 3


async def test_cancelling_a_drain_cancels_every_lane() -> None:
    clock = ManualClock(T0)
    ctx = RunContext.at(T0, clock=clock)
    calls = 0
    running = asyncio.Event()
    cancelled = 0

    async def batch() -> int:
        nonlocal calls, cancelled
        calls += 1
        if calls == 1:
            return 3
        if calls == 3:
            running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled += 1
            raise
        return 0

    task = asyncio.create_task(drain(ctx, batch, clock=clock, batch_size=3, lanes=2))
    await running.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (calls, cancelled) == (3, 2)
