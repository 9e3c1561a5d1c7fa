"""Timer registry on virtual time: a claimant that died or stalled loses its slot by lease."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry

from devkit.harness.timer_fakes import FakeSleeper, InMemoryTimerStore
from devkit.harness.timers import (
    FailingClaims,
    Recorder,
    World,
    at,
    counts,
    sched,
)
from streams.timers import (
    Misfire,
    Mode,
    TimerMetrics,
    TimerRegistry,
)
from streams.timers.context import RunContext


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

    names = (
        "reminders_timer_slot_takeovers_total",
        "reminders_timer_lease_lost_total",
        "reminders_timer_claim_retries_total",
    )
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
