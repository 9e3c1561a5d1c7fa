"""Timer slot claims and state on real PostgreSQL: insert-wins, monotonic state, clean shutdown."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from db.connector import connect, transaction
from db.queries import sql
from db.timers import TimerRepository
from streams.clock import ManualClock
from streams.timers import Mode, Schedule, TimerRegistry
from streams.timers.context import RunContext

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
    assert await repo.finish_slot("a", T0, "r1", "ok", 0.25)
    # A finish from a run that does not own the slot changes nothing.
    assert not await repo.finish_slot("a", T0, "r4", "failed", 9.0)
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


LEASE = T0 + timedelta(seconds=40)


async def test_concurrent_takeovers_of_an_expired_slot_have_exactly_one_winner(
    database_url: str,
) -> None:
    conns = [await connect(database_url) for _ in range(12)]
    try:
        repos = [TimerRepository(c) for c in conns]
        assert await repos[0].claim_slot("job", T0, "dead", "run-dead", LEASE)

        async def race(now: datetime) -> list[bool]:
            return list(
                await asyncio.gather(
                    *(
                        r.reclaim_slot(
                            "job", T0, f"w{i}", f"run-{i}", now + timedelta(minutes=1), now
                        )
                        for i, r in enumerate(repos)
                    )
                )
            )

        # The lease still runs: nobody takes the slot over.
        assert await race(LEASE - timedelta(seconds=1)) == [False] * 12
        results = await race(LEASE)
        assert results.count(True) == 1
        winner = results.index(True)
        row = await conns[0].fetchrow(
            "SELECT claimed_by, run_id, takeovers, lease_expires_at FROM ops.timer_slots "
            "WHERE name = 'job' AND slot = $1",
            T0,
        )
        assert (row["claimed_by"], row["run_id"], row["takeovers"]) == (
            f"w{winner}",
            f"run-{winner}",
            1,
        )
        # The new holder's lease is live: a second round finds nothing to take over.
        assert await race(LEASE + timedelta(seconds=30)) == [False] * 12
    finally:
        for c in conns:
            await c.close()


async def test_a_finished_or_lease_less_slot_is_never_taken_over(pool: asyncpg.Pool) -> None:
    repo = TimerRepository(pool)
    assert await repo.claim_slot("job", T0, "w1", "r1", LEASE)
    assert await repo.finish_slot("job", T0, "r1", "ok", 1.0)
    later = LEASE + timedelta(hours=1)
    assert not await repo.reclaim_slot("job", T0, "w2", "r2", later, later)
    # A claim made before leases existed (NULL) is never presumed dead.
    assert await repo.claim_slot("job", T0 + timedelta(minutes=1), "w1", "r3")
    assert not await repo.reclaim_slot("job", T0 + timedelta(minutes=1), "w2", "r4", later, later)
    assert await repo.unfinished_slots("job", T0, 10) == []


async def test_the_original_holders_finish_after_a_takeover_changes_nothing(
    pool: asyncpg.Pool,
) -> None:
    repo = TimerRepository(pool)
    assert await repo.claim_slot("job", T0, "w1", "r1", LEASE)
    assert await repo.reclaim_slot("job", T0, "w2", "r2", LEASE + timedelta(minutes=1), LEASE)
    assert await repo.finish_slot("job", T0, "r2", "ok", 2.0)
    assert not await repo.finish_slot("job", T0, "r1", "timeout", 40.0)
    row = await pool.fetchrow(
        "SELECT claimed_by, run_id, result, duration_seconds FROM ops.timer_slots "
        "WHERE name = 'job' AND slot = $1",
        T0,
    )
    assert tuple(row) == ("w2", "r2", "ok", 2.0)


async def test_unfinished_slots_are_listed_from_an_index(pool: asyncpg.Pool) -> None:
    repo = TimerRepository(pool)
    for k in range(6):
        slot = T0 + timedelta(minutes=k)
        assert await repo.claim_slot("job", slot, "w", f"r{k}", slot + timedelta(seconds=40))
        if k % 2 == 0:
            await repo.finish_slot("job", slot, f"r{k}", "ok", 1.0)
    await repo.claim_slot("other", T0 + timedelta(minutes=3), "w", "o", LEASE)
    assert await repo.unfinished_slots("job", T0 + timedelta(minutes=2), 10) == [
        (T0 + timedelta(minutes=k), T0 + timedelta(minutes=k, seconds=40)) for k in (3, 5)
    ]
    assert len(await repo.unfinished_slots("job", T0, 1)) == 1
    async with pool.acquire() as conn, conn.transaction():
        # Tiny tables are scanned whatever the indexes; forbid that to see the index is usable.
        await conn.execute("SET LOCAL enable_seqscan = off")
        plan = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + sql("timer_slots_unfinished"), "job", T0, 10
        )
    assert "ix_timer_slots_unfinished" in str(plan)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[datetime] = []

    async def run_once(self, ctx: RunContext) -> None:
        self.calls.append(ctx.as_of)


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

    async def run_once(self, ctx: RunContext) -> None:
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


async def _open_transactions(pool: asyncpg.Pool, last_query: str) -> int:
    """Sessions of this test's database idle inside a transaction after ``last_query``."""
    count = await pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND state = 'idle in transaction' AND query = $1",
        last_query,
    )
    return int(count)


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
    began = asyncio.Event()

    async def stop() -> None:
        began.set()
        await reg.stop(timeout=10)

    stopping = asyncio.create_task(stop())
    # A signal, not a sleep: once the task has set it, stop() runs up to its first wait.
    await began.wait()
    assert reg.stopping
    # The run is still inside its transaction (PostgreSQL sees it) and stop() waits for it.
    assert await _open_transactions(pool, "INSERT INTO shutdown_probe (v) VALUES (1)") == 1
    assert not stopping.done()
    handler.release.set()
    await stopping
    assert await pool.fetchval("SELECT count(*) FROM shutdown_probe") == 2
    assert reg.list()[0]["last_result"] == "ok"


def cluster_job(handler: object, max_duration: timedelta = timedelta(seconds=30)) -> Schedule:
    return Schedule(
        name="job",
        interval=timedelta(minutes=1),
        handler=handler,  # type: ignore[arg-type]
        max_duration=max_duration,
        mode=Mode.CLUSTER_ONCE,
    )


async def test_a_slot_whose_claimant_was_killed_is_run_by_another_worker(
    pool: asyncpg.Pool,
) -> None:
    clock = ManualClock(T0 + timedelta(seconds=1))
    repo = TimerRepository(pool)
    rec = Recorder()
    reg = TimerRegistry(store=repo, clock=clock, environ={}, worker_id="w2")
    reg.register(cluster_job(rec))
    await reg.run_due()
    slot = T0 + timedelta(minutes=1)
    # w1 claimed the slot (lease: 30 s max duration + 10 s margin) and was SIGKILLed.
    assert await repo.claim_slot("job", slot, "w1", "r-dead", slot + timedelta(seconds=40))
    clock.set(slot)
    assert [r.result for r in await reg.run_due()] == ["deduped"]
    clock.set(slot + timedelta(seconds=39))
    assert await reg.run_due() == []
    clock.set(slot + timedelta(seconds=40))
    [record] = await reg.run_due()
    assert (record.slot, record.kind, record.result) == (slot, "reclaimed", "ok")
    assert rec.calls == [slot]
    row = await pool.fetchrow(
        "SELECT claimed_by, run_id, result, takeovers FROM ops.timer_slots WHERE slot = $1", slot
    )
    assert tuple(row) == ("w2", record.run_id, "ok", 1)
    # Nothing left to take over; the next slot is business as usual.
    clock.set(slot + timedelta(minutes=1))
    assert [(r.kind, r.result) for r in await reg.run_due()] == [("on_time", "ok")]


class NeverSleeper:
    """A paused process: its run's deadline never fires."""

    async def sleep_until(self, instant: datetime) -> None:
        await asyncio.Event().wait()


class Gate:
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def run_once(self, ctx: RunContext) -> str:
        self.started.set()
        await self.release.wait()
        return "late"


async def test_a_paused_holder_is_taken_over_and_its_late_finish_is_fenced(
    pool: asyncpg.Pool,
) -> None:
    clock = ManualClock(T0 + timedelta(seconds=1))
    gate, rec = Gate(), Recorder()
    paused = TimerRegistry(
        store=TimerRepository(pool), clock=clock, sleeper=NeverSleeper(), environ={}, worker_id="w1"
    )
    other = TimerRegistry(store=TimerRepository(pool), clock=clock, environ={}, worker_id="w2")
    paused.register(cluster_job(gate))
    other.register(cluster_job(rec))
    await paused.run_due()
    await other.run_due()
    slot = T0 + timedelta(minutes=1)
    clock.set(slot)
    held = asyncio.create_task(paused.run_due())
    await asyncio.wait_for(gate.started.wait(), timeout=10)
    assert [r.result for r in await other.run_due()] == ["deduped"]
    clock.set(slot + timedelta(seconds=40))  # w1's lease (30 s + 10 s) ran out
    [record] = await other.run_due()
    assert (record.kind, record.result, rec.calls) == ("reclaimed", "ok", [slot])
    gate.release.set()
    [late] = await asyncio.wait_for(held, timeout=10)
    assert late.result == "ok"
    row = await pool.fetchrow(
        "SELECT claimed_by, run_id, result FROM ops.timer_slots WHERE slot = $1", slot
    )
    assert tuple(row) == ("w2", record.run_id, "ok")
    assert [r["counts"]["lease_lost"] for r in paused.list()] == [1]


class FailingOnce:
    """The real store, except that the first slot claim raises (PostgreSQL unavailable)."""

    def __init__(self, repo: TimerRepository) -> None:
        self.repo = repo
        self.failed = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.repo, name)

    async def claim_slot(self, *args: object) -> bool:
        if not self.failed:
            self.failed = True
            raise ConnectionRefusedError("postgres down")
        return await self.repo.claim_slot(*args)  # type: ignore[arg-type]


async def test_a_slot_whose_claim_failed_once_runs_on_the_next_step(pool: asyncpg.Pool) -> None:
    clock = ManualClock(T0 + timedelta(seconds=1))
    rec = Recorder()
    reg = TimerRegistry(
        store=FailingOnce(TimerRepository(pool)),  # type: ignore[arg-type]
        clock=clock,
        environ={},
        worker_id="w1",
    )
    reg.register(cluster_job(rec))
    await reg.run_due()
    slot = T0 + timedelta(minutes=1)
    clock.set(slot)
    assert [r.result for r in await reg.run_due()] == ["failed"]
    clock.set(slot + timedelta(seconds=2))
    [record] = await reg.run_due()
    assert (record.slot, record.kind, record.result) == (slot, "on_time", "ok")
    assert rec.calls == [slot]
    assert await pool.fetchval("SELECT result FROM ops.timer_slots WHERE slot = $1", slot) == "ok"
