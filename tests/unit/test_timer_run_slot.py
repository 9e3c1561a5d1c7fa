"""TimerRegistry.run_slot: one slot now, through the scheduled path's claim and run rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from devkit.harness.timer_fakes import InMemoryTimerStore
from streams.clock import ManualClock
from streams.timers import Mode, Schedule, TimerRegistry
from streams.timers.context import RunContext

NOW = datetime(2026, 6, 10, 9, 15, tzinfo=UTC)
DAILY_SLOT = datetime(2026, 6, 10, 0, 30, tzinfo=UTC)


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.as_of: list[datetime] = []
        self.fail = fail

    async def run_once(self, ctx: RunContext) -> dict[str, int]:
        self.as_of.append(ctx.as_of)
        if self.fail:
            raise RuntimeError("boom")
        return {"runs": len(self.as_of)}


def registry(
    handler: Recorder, mode: Mode = Mode.CLUSTER_ONCE
) -> tuple[TimerRegistry, InMemoryTimerStore]:
    store = InMemoryTimerStore()
    reg = TimerRegistry(store=store, clock=ManualClock(NOW), environ={})
    reg.register(
        Schedule(
            name="daily",
            cron="30 0 * * *",
            handler=handler,
            max_duration=timedelta(minutes=10),
            mode=mode,
        )
    )
    return reg, store


async def test_a_manual_run_claims_the_slot_as_the_schedule_would_and_runs_it_as_of_the_slot() -> (
    None
):
    handler = Recorder()
    reg, store = registry(handler)
    first = await reg.run_slot("daily")
    assert (first.result, first.kind, first.slot, first.as_of) == (
        "ok",
        "manual",
        DAILY_SLOT,
        DAILY_SLOT,
    )
    assert first.summary == {"runs": 1}
    assert store.finished == {("daily", DAILY_SLOT): "ok"}
    # The same slot again, or the scheduled run of it: claimed already, not run twice.
    again = await reg.run_slot("daily", NOW - timedelta(hours=1))
    assert again.result == "deduped" and handler.as_of == [DAILY_SLOT]
    # Another worker on the same store: the claim is cluster-wide.
    other = TimerRegistry(store=store, clock=ManualClock(NOW), environ={})
    other.register(
        Schedule(
            name="daily",
            cron="30 0 * * *",
            handler=handler,
            max_duration=timedelta(minutes=10),
            mode=Mode.CLUSTER_ONCE,
        )
    )
    assert (await other.run_slot("daily")).result == "deduped" and handler.as_of == [DAILY_SLOT]


async def test_as_of_replays_a_missed_day_and_rerun_repeats_a_claimed_slot_without_a_claim() -> (
    None
):
    handler = Recorder()
    reg, store = registry(handler)
    missed = await reg.run_slot("daily", datetime(2026, 6, 7, 18, 0, tzinfo=UTC))
    assert missed.slot == datetime(2026, 6, 7, 0, 30, tzinfo=UTC) and missed.result == "ok"
    await reg.run_slot("daily")
    rerun = await reg.run_slot("daily", rerun=True)
    assert (rerun.result, rerun.kind, rerun.slot, rerun.as_of) == (
        "ok",
        "manual_rerun",
        None,
        DAILY_SLOT,
    )
    assert handler.as_of == [missed.slot, DAILY_SLOT, DAILY_SLOT]
    assert len(store.slots) == 2


async def test_a_failing_run_is_reported_failed_and_the_future_and_unknown_names_are_refused() -> (
    None
):
    reg, _ = registry(Recorder(fail=True))
    failed = await reg.run_slot("daily")
    assert failed.result == "failed" and failed.error == "RuntimeError"  # never its message
    with pytest.raises(ValueError, match="future"):
        await reg.run_slot("daily", NOW + timedelta(seconds=1))
    with pytest.raises(ValueError, match="timezone-aware"):
        await reg.run_slot("daily", datetime(2026, 6, 10, 1, 0))
    with pytest.raises(KeyError, match="nope"):
        await reg.run_slot("nope")


async def test_every_instance_schedules_run_without_a_claim() -> None:
    handler = Recorder()
    reg, store = registry(handler, Mode.EVERY_INSTANCE)
    assert (await reg.run_slot("daily")).result == "ok"
    assert (await reg.run_slot("daily")).result == "ok"
    assert store.slots == {} and handler.as_of == [DAILY_SLOT, DAILY_SLOT]
