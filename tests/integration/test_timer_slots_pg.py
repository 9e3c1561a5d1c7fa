"""Timer slot claims and state on real PostgreSQL: insert-wins, monotonic state, clean shutdown."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from db.connector import connect, transaction
from db.timers import TimerRepository
from streams.clock import ManualClock
from streams.timers import Mode, Schedule, TimerRegistry

pytestmark = pytest.mark.integration

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)


async def test_concurrent_claims_of_one_slot_have_exactly_one_winner(database_url: str) -> None:
    # Separate connections, so the INSERTs really race inside PostgreSQL.
    conns = [await connect(database_url) for _ in range(12)]
    try:
        repos = [TimerRepository(c) for c in conns]
        for round_ in range(5):
            slot = T0 + timedelta(minutes=round_)
            results = await asyncio.gather(
                *(
                    r.claim_slot("job", slot, f"w{i}", f"run-{round_}-{i}")
                    for i, r in enumerate(repos)
                )
            )
            assert results.count(True) == 1
            winner = results.index(True)
            row = await conns[0].fetchrow(
                "SELECT claimed_by, run_id FROM ops.timer_slots WHERE name = 'job' AND slot = $1",
                slot,
            )
            assert (row["claimed_by"], row["run_id"]) == (f"w{winner}", f"run-{round_}-{winner}")
    finally:
        for c in conns:
            await c.close()


async def test_claims_are_per_name_and_slot(pool: asyncpg.Pool) -> None:
    repo = TimerRepository(pool)
    assert await repo.claim_slot("a", T0, "w1", "r1")
    assert await repo.claim_slot("b", T0, "w1", "r2")
    assert await repo.claim_slot("a", T0 + timedelta(minutes=1), "w1", "r3")
    assert not await repo.claim_slot("a", T0, "w2", "r4")
    await repo.finish_slot("a", T0, "r1", "ok", 0.25)
    # A finish from a run that does not own the slot changes nothing.
    await repo.finish_slot("a", T0, "r4", "failed", 9.0)
    row = await pool.fetchrow(
        "SELECT result, duration_seconds, finished_at FROM ops.timer_slots "
        "WHERE name = 'a' AND slot = $1",
        T0,
    )
    assert (row["result"], row["duration_seconds"]) == ("ok", 0.25)
    assert row["finished_at"] is not None


async def test_state_never_moves_backwards(pool: asyncpg.Pool) -> None:
    repo = TimerRepository(pool)
    assert await repo.last_slots(["job"]) == {}
    await repo.advance_state("job", T0 + timedelta(minutes=5), "w1")
    await repo.advance_state("job", T0 + timedelta(minutes=2), "w2")
    await repo.advance_state("other", T0, "w2")
    assert await repo.last_slots(["job", "other", "missing"]) == {
        "job": T0 + timedelta(minutes=5),
        "other": T0,
    }


async def test_prune_deletes_old_claims_in_batches(pool: asyncpg.Pool) -> None:
    repo = TimerRepository(pool)
    for k in range(7):
        await repo.claim_slot("job", T0 + timedelta(minutes=k), "w", f"r{k}")
    assert await repo.prune_slots(T0 + timedelta(minutes=5), 3) == 3
    assert await repo.prune_slots(T0 + timedelta(minutes=5), 3) == 2
    assert await repo.prune_slots(T0 + timedelta(minutes=5), 3) == 0
    assert await pool.fetchval("SELECT count(*) FROM ops.timer_slots") == 2


class Recorder:
    def __init__(self) -> None:
        self.calls: list[datetime] = []

    async def run_once(self, as_of: datetime) -> None:
        self.calls.append(as_of)


async def test_registries_sharing_postgres_run_each_cluster_once_slot_once(
    pool: asyncpg.Pool,
) -> None:
    clock = ManualClock(T0 + timedelta(seconds=1))
    handlers = [Recorder() for _ in range(3)]
    registries = [
        TimerRegistry(store=TimerRepository(pool), clock=clock, environ={}, worker_id=f"w{i}")
        for i in range(3)
    ]
    for reg, handler in zip(registries, handlers, strict=True):
        reg.register(
            Schedule(
                name="job",
                interval=timedelta(minutes=1),
                handler=handler,
                max_duration=timedelta(seconds=30),
                mode=Mode.CLUSTER_ONCE,
            )
        )
        await reg.run_due()
    for k in range(1, 11):
        clock.set(T0 + timedelta(minutes=k))
        await asyncio.gather(*(reg.run_due() for reg in registries))
    runs = Counter(c for h in handlers for c in h.calls)
    assert sorted(runs) == [T0 + timedelta(minutes=k) for k in range(1, 11)]
    assert set(runs.values()) == {1}
    rows = await pool.fetch("SELECT slot, result FROM ops.timer_slots ORDER BY slot")
    assert [r["slot"] for r in rows] == sorted(runs)
    assert {r["result"] for r in rows} == {"ok"}
    assert await TimerRepository(pool).last_slots(["job"]) == {"job": T0 + timedelta(minutes=10)}


class TwoInserts:
    """Writes two rows in one transaction, pausing in between until released."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.inside = asyncio.Event()
        self.release = asyncio.Event()

    async def run_once(self, as_of: datetime) -> None:
        async with transaction(self.pool) as conn:
            await conn.execute("INSERT INTO shutdown_probe (v) VALUES (1)")
            self.inside.set()
            await self.release.wait()
            await conn.execute("INSERT INTO shutdown_probe (v) VALUES (2)")


async def _started_registry(pool: asyncpg.Pool, handler: TwoInserts) -> TimerRegistry:
    await pool.execute("CREATE TABLE shutdown_probe (v int NOT NULL)")
    reg = TimerRegistry(store=TimerRepository(pool), environ={})
    reg.register(
        Schedule(
            name="writer",
            interval=timedelta(hours=1),
            handler=handler,
            max_duration=timedelta(minutes=5),
            mode=Mode.EVERY_INSTANCE,
        )
    )
    await reg.start()
    reg.wake("writer")
    await asyncio.wait_for(handler.inside.wait(), timeout=10)
    return reg


async def test_shutdown_cancels_an_overlong_run_and_its_transaction_rolls_back(
    pool: asyncpg.Pool,
) -> None:
    handler = TwoInserts(pool)
    reg = await _started_registry(pool, handler)
    await reg.stop(timeout=0.2)
    assert await pool.fetchval("SELECT count(*) FROM shutdown_probe") == 0
    assert reg.list()[0]["last_result"] == "cancelled"


async def test_shutdown_lets_a_run_finish_and_commit_within_the_bound(pool: asyncpg.Pool) -> None:
    handler = TwoInserts(pool)
    reg = await _started_registry(pool, handler)
    stopping = asyncio.create_task(reg.stop(timeout=10))
    await asyncio.sleep(0.05)
    assert not stopping.done()
    handler.release.set()
    await stopping
    assert await pool.fetchval("SELECT count(*) FROM shutdown_probe") == 2
    assert reg.list()[0]["last_result"] == "ok"
