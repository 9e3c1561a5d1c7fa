"""Timer registry on virtual time: each slot runs on every instance or once, cron times."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from devkit.harness.timers import (
    Recorder,
    World,
    at,
    counts,
    sched,
)
from streams.timers import (
    Mode,
)


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
    assert world.sample("reminders_timer_slot_dedupes_total", schedule="job") == 5


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
