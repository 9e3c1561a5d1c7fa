"""What the registry gives a handler (one RunContext per run) and tells when a run ends."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from devkit.harness.timer_fakes import FakeSleeper, InMemoryTimerStore
from streams.clock import ManualClock
from streams.timers import Mode, RunContext, RunRecord, Schedule, TimerRegistry

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)


class Seen:
    """Keeps the context of every run; the first one waits for ``release`` when set."""

    def __init__(self, hold: bool = False) -> None:
        self.contexts: list[RunContext] = []
        self.entered = asyncio.Event()
        self.stop_seen: list[bool] = []
        self.release = asyncio.Event()
        if not hold:
            self.release.set()

    async def run_once(self, ctx: RunContext) -> dict[str, str]:
        self.contexts.append(ctx)
        self.entered.set()
        await self.release.wait()
        self.stop_seen.append(ctx.should_stop())
        return {"run_id": ctx.run_id}


def registry(clock: ManualClock, handler: Seen, mode: Mode = Mode.CLUSTER_ONCE) -> TimerRegistry:
    reg = TimerRegistry(
        store=InMemoryTimerStore(), clock=clock, sleeper=FakeSleeper(clock), environ={}
    )
    reg.register(
        Schedule(
            name="job",
            interval=timedelta(minutes=1),
            handler=handler,
            max_duration=timedelta(seconds=20),
            mode=mode,
        )
    )
    return reg


async def test_a_run_gets_the_registry_run_id_its_slot_kind_and_budget() -> None:
    clock = ManualClock(T0 + timedelta(minutes=3))
    clock.advance(7)  # a monotonic reading other than 0
    handler = Seen()
    reg = registry(clock, handler)
    record = await reg.run_slot("job")
    [ctx] = handler.contexts
    assert record.result == "ok"
    assert ctx.run_id == record.run_id == record.summary["run_id"]
    assert (ctx.slot, ctx.as_of, ctx.kind) == (T0 + timedelta(minutes=3),) * 2 + ("manual",)
    # The deadline is where the registry cancels the run: its start + the max duration.
    assert (ctx.started, ctx.deadline) == (clock.monotonic(), clock.monotonic() + 20)
    again = await reg.run_slot("job", rerun=True)
    assert handler.contexts[1].run_id == again.run_id != record.run_id
    assert (handler.contexts[1].slot, handler.contexts[1].kind) == (None, "manual_rerun")


async def test_the_stop_flag_of_a_run_is_the_registrys() -> None:
    clock = ManualClock(T0)
    handler = Seen(hold=True)
    reg = registry(clock, handler, Mode.EVERY_INSTANCE)
    run = asyncio.create_task(reg.run_slot("job", rerun=True))
    await handler.entered.wait()
    assert not handler.contexts[0].should_stop()
    stopping = asyncio.create_task(reg.interrupt(grace=5))
    handler.release.set()
    await asyncio.gather(run, stopping)
    assert handler.stop_seen == [True]


async def test_every_ended_run_is_told_and_can_be_waited_for() -> None:
    clock = ManualClock(T0)
    handler = Seen()
    reg = registry(clock, handler)
    told: list[RunRecord] = []
    reg.on_run_finished(told.append)
    assert reg.finished_runs("job") == 0
    waiting = asyncio.create_task(reg.run_finished("job"))
    ok = await reg.run_slot("job")
    deduped = await reg.run_slot("job")  # the slot is claimed already
    assert (ok.result, deduped.result) == ("ok", "deduped")
    assert told == [ok, deduped]
    assert await waiting is ok
    assert reg.finished_runs("job") == 2
    # A count already reached returns at once, with the latest record.
    assert await reg.run_finished("job", 1) is deduped
    with pytest.raises(KeyError):
        await reg.run_finished("nope")
