"""Timer registry on virtual time: failing handlers and claims, over-long runs, shutdown."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest

from devkit.harness.timer_fakes import InMemoryTimerStore, quiescent
from devkit.harness.timers import (
    FailingClaims,
    Flaky,
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
    TimerRegistry,
)
from streams.timers.leases import CLAIM_RETRY_MAX, claim_backoff


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
    assert world.sample("reminders_timer_runs_total", schedule="job", result="failed") == 1
    assert world.sample("reminders_timer_runs_total", schedule="job", result="ok") == 1
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
    assert world.sample("reminders_timer_runs_total", schedule="job", result="timeout") == 1
    durations = world.sample("reminders_timer_run_duration_seconds_sum", schedule="job")
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
    assert world.sample("reminders_timer_runs_total", schedule="job", result="cancelled") == 1


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
    assert world.sample("reminders_timer_missed_slots_total", schedule="job") == 1
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
