"""Retries of cluster-once slots on real PostgreSQL, through the registry: a failed, timed-out
or cancelled run releases its slot (same row, same key) for another attempt after a backoff,
up to the bound; a graceful stop hands the slot back for another worker."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from db.queries import sql
from db.timers import TimerRepository
from devkit.harness.timer_fakes import FakeSleeper
from devkit.wait import eventually
from streams.clock import ManualClock
from streams.timers import HandBack, Misfire, Mode, Schedule, TimerRegistry
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
SLOT = T0 + timedelta(hours=1)
BACKOFF = timedelta(seconds=30)


class Flaky:
    """Fails its first ``failures`` runs, then succeeds."""

    def __init__(self, failures: int = 1) -> None:
        self.failures = failures
        self.calls: list[datetime] = []

    async def run_once(self, ctx: RunContext) -> str:
        self.calls.append(ctx.as_of)
        if len(self.calls) <= self.failures:
            raise RuntimeError("kafka unreachable: secret DETAIL text")
        return "done"


def job(handler: object, *, attempts: int = 3, misfire: Misfire = Misfire.SKIP) -> Schedule:
    return Schedule(
        name="job",
        interval=timedelta(hours=1),
        handler=handler,  # type: ignore[arg-type]
        max_duration=timedelta(seconds=30),
        mode=Mode.CLUSTER_ONCE,
        misfire=misfire,
        retry_attempts=attempts,
        retry_backoff=BACKOFF,
    )


def registry(pool: asyncpg.Pool, clock: ManualClock, worker: str, **kw: Any) -> TimerRegistry:
    return TimerRegistry(
        store=TimerRepository(pool), clock=clock, environ={}, worker_id=worker, **kw
    )


async def slot_row(pool: asyncpg.Pool, slot: datetime = SLOT) -> dict[str, Any]:
    row = await pool.fetchrow(
        "SELECT claimed_by, run_id, result, attempts, handbacks, takeovers, last_error,"
        " finished_at IS NOT NULL AS finished, released_at IS NOT NULL AS released,"
        " next_attempt_at FROM ops.timer_slots WHERE name = 'job' AND slot = $1",
        slot,
    )
    assert row is not None
    return dict(row)


def counts(reg: TimerRegistry) -> dict[str, int]:
    [view] = reg.list()
    return dict(view["counts"])


async def test_a_run_that_fails_once_is_retried_on_the_same_slot_by_any_worker(
    pool: asyncpg.Pool,
) -> None:
    clock = ManualClock(T0 + timedelta(seconds=1))
    first, second = Flaky(failures=1), Flaky(failures=0)
    w1, w2 = registry(pool, clock, "w1"), registry(pool, clock, "w2")
    w1.register(job(first))
    w2.register(job(second))
    await w1.run_due()
    await w2.run_due()
    clock.set(SLOT)
    [failed] = await w1.run_due()
    assert (failed.slot, failed.result) == (SLOT, "failed")
    row = await slot_row(pool)
    assert (row["finished"], row["released"], row["result"], row["attempts"]) == (
        False,
        True,
        "failed",
        1,
    )
    # The class only: no message, no driver DETAIL in the ledger.
    assert row["last_error"] == "RuntimeError"
    assert row["next_attempt_at"] == SLOT + BACKOFF
    assert counts(w1)["retries"] == 1
    # Before the backoff nobody takes it: the on-time claim is deduped, no retry yet.
    clock.set(SLOT + BACKOFF - timedelta(seconds=1))
    assert [r.result for r in await w2.run_due()] == ["deduped"]
    assert second.calls == []
    clock.set(SLOT + BACKOFF)
    [retry] = await w2.run_due()
    assert (retry.slot, retry.as_of, retry.result) == (SLOT, SLOT, "ok")
    assert second.calls == [SLOT]
    row = await slot_row(pool)
    assert (row["finished"], row["released"], row["result"], row["attempts"]) == (
        True,
        False,
        "ok",
        2,
    )
    assert (row["claimed_by"], row["run_id"], row["takeovers"]) == ("w2", retry.run_id, 0)
    # Done: nobody runs it a third time.
    clock.set(SLOT + timedelta(minutes=10))
    assert await w1.run_due() == [] and await w2.run_due() == []
    assert first.calls == [SLOT]


class Hangs:
    """Never ends on its first run (cancelled at max duration), returns on the next."""

    def __init__(self) -> None:
        self.calls = 0

    async def run_once(self, ctx: RunContext) -> str:
        self.calls += 1
        if self.calls == 1:
            await asyncio.Event().wait()
        return "done"


class QuickDeadline:
    """Every run's max duration passes after a tenth of a second of real time."""

    async def sleep_until(self, instant: datetime) -> None:
        await asyncio.sleep(0.1)


async def test_a_timed_out_run_is_retried_after_the_backoff(pool: asyncpg.Pool) -> None:
    clock = ManualClock(T0 + timedelta(seconds=1))
    handler = Hangs()
    reg = registry(pool, clock, "w1", sleeper=QuickDeadline())
    reg.register(job(handler))
    await reg.run_due()
    clock.set(SLOT)
    [timed_out] = await reg.run_due()
    assert timed_out.result == "timeout"
    row = await slot_row(pool)
    assert (row["released"], row["result"], row["attempts"], row["last_error"]) == (
        True,
        "timeout",
        1,
        "timeout",
    )
    clock.set(SLOT + BACKOFF)
    [retry] = await reg.run_due()
    assert (retry.slot, retry.kind, retry.result) == (SLOT, "reclaimed", "ok")
    row = await slot_row(pool)
    assert (row["finished"], row["result"], row["attempts"]) == (True, "ok", 2)


async def test_the_attempt_bound_makes_the_slot_final_failed(pool: asyncpg.Pool) -> None:
    clock = ManualClock(T0 + timedelta(seconds=1))
    handler = Flaky(failures=99)
    reg = registry(pool, clock, "w1")
    reg.register(job(handler, attempts=2))
    await reg.run_due()
    clock.set(SLOT)
    assert [r.result for r in await reg.run_due()] == ["failed"]
    clock.set(SLOT + BACKOFF)
    assert [r.result for r in await reg.run_due()] == ["failed"]
    row = await slot_row(pool)
    assert (row["finished"], row["released"], row["result"], row["attempts"]) == (
        True,
        False,
        "failed",
        2,
    )
    assert (counts(reg)["retries"], counts(reg)["given_up"]) == (1, 1)
    clock.set(SLOT + timedelta(minutes=30))
    assert await reg.run_due() == []
    assert len(handler.calls) == 2


async def test_a_released_slot_past_its_misfire_window_is_given_up_not_retried(
    pool: asyncpg.Pool,
) -> None:
    # skip: a released slot is retried until the next slot fires, not after (that one does
    # the work); the retry window is the takeover's (reclaim_floor).
    clock = ManualClock(T0 + timedelta(seconds=1))
    handler = Flaky(failures=1)
    reg = registry(pool, clock, "w1")
    reg.register(job(handler))
    await reg.run_due()
    clock.set(SLOT)
    assert [r.result for r in await reg.run_due()] == ["failed"]
    later = SLOT + timedelta(hours=1, minutes=5)
    clock.set(later)
    records = await reg.run_due()
    assert [(r.slot, r.result) for r in records] == []  # the next slot is missed (skip)
    assert handler.calls == [SLOT]
    # Final with its last result, and counted as given up.
    row = await slot_row(pool)
    assert (row["finished"], row["released"], row["result"], row["attempts"]) == (
        True,
        False,
        "failed",
        1,
    )
    assert counts(reg)["given_up"] == 1


async def test_a_released_slot_is_claimable_by_a_manual_run_before_its_backoff(
    pool: asyncpg.Pool,
) -> None:
    clock = ManualClock(T0 + timedelta(seconds=1))
    handler = Flaky(failures=1)
    reg = registry(pool, clock, "w1")
    reg.register(job(handler))
    await reg.run_due()
    clock.set(SLOT + timedelta(seconds=1))
    assert [r.result for r in await reg.run_due()] == ["failed"]
    operator = registry(pool, clock, "cli")
    operator.register(job(Flaky(failures=0)))
    manual = await operator.run_slot("job", SLOT)
    assert (manual.kind, manual.result) == ("manual", "ok")
    row = await slot_row(pool)
    assert (row["claimed_by"], row["finished"], row["attempts"]) == ("cli", True, 2)
    # A finished slot is still refused (exit 3).
    again = await operator.run_slot("job", SLOT)
    assert again.result == "deduped"


class Gate:
    """Runs until released or cancelled; with ``hand_back`` it stops early when the
    registry stops, as long handlers do between units of work."""

    def __init__(self, hand_back: TimerRegistry | None = None) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.hand_back = hand_back

    async def run_once(self, ctx: RunContext) -> str:
        self.started.set()
        await self.release.wait()
        if self.hand_back is not None and self.hand_back.stopping:
            raise HandBack
        return "done"


@pytest.mark.parametrize("how", ["cancelled", "handed_back"])
async def test_a_graceful_stop_hands_the_slot_back_to_another_worker(
    pool: asyncpg.Pool, how: str
) -> None:
    clock = ManualClock(T0 + timedelta(seconds=1))
    sleeper = FakeSleeper(clock)
    stopping = registry(pool, clock, "w1", sleeper=sleeper)
    gate = Gate(hand_back=stopping if how == "handed_back" else None)
    stopping.register(job(gate))
    await stopping.start()
    await sleeper.advance_to(SLOT)
    await asyncio.wait_for(gate.started.wait(), timeout=10)
    if how == "handed_back":
        stop = asyncio.create_task(stopping.stop(timeout=10))
        await asyncio.sleep(0)
        gate.release.set()
        await asyncio.wait_for(stop, timeout=10)
    else:
        # The run outlives the stop's grace and is cancelled.
        await asyncio.wait_for(stopping.stop(timeout=0.1), timeout=10)
    row = await slot_row(pool)
    assert (row["finished"], row["released"], row["attempts"], row["handbacks"]) == (
        False,
        True,
        0,
        1,
    )
    assert counts(stopping)["handed_back"] == 1 and counts(stopping)["retries"] == 0
    # The next worker takes it at once (no backoff) and completes the same slot.
    other = Flaky(failures=0)
    w2 = registry(pool, clock, "w2")
    w2.register(job(other))
    [record] = await w2.run_due()
    assert (record.slot, record.result) == (SLOT, "ok")
    row = await slot_row(pool)
    assert (row["finished"], row["result"], row["attempts"], row["claimed_by"]) == (
        True,
        "ok",
        1,
        "w2",
    )


async def test_a_running_worker_picks_up_a_handed_back_slot_within_its_poll(
    pool: asyncpg.Pool,
) -> None:
    clock = ManualClock(T0 + timedelta(seconds=1))
    sleeper = FakeSleeper(clock)
    poll = timedelta(seconds=20)
    w1 = registry(pool, clock, "w1", sleeper=sleeper, released_poll=poll)
    gate = Gate()
    w1.register(job(gate))
    await w1.start()
    await sleeper.advance_to(SLOT)
    await asyncio.wait_for(gate.started.wait(), timeout=10)
    # w2 comes up while w1 holds the slot (lease: 30 s + 10 s margin).
    other = Flaky(failures=0)
    w2 = registry(pool, clock, "w2", sleeper=sleeper, released_poll=poll)
    w2.register(job(other))
    await w2.start()
    try:
        await sleeper.advance(timedelta(seconds=1))
        await asyncio.wait_for(w1.stop(timeout=0.1), timeout=10)
        assert (await slot_row(pool))["released"]
        # Not before w2's next look ...
        await sleeper.advance(poll - timedelta(seconds=2))
        assert other.calls == []
        # ... which comes well before the old holder's lease would have run out.
        await sleeper.advance(timedelta(seconds=1))
        await eventually(
            lambda: slot_row(pool),
            timeout=2.0,
            what="w2 finished the slot",
            until=lambda r: r["finished"],
            interval=0.01,
        )
        assert other.calls == [SLOT]
        row = await slot_row(pool)
        assert (row["finished"], row["result"], row["claimed_by"], row["handbacks"]) == (
            True,
            "ok",
            "w2",
            1,
        )
    finally:
        await w2.stop(timeout=5)


async def test_giving_up_released_slots_reads_the_unfinished_index(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        plan = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + sql("timer_slots_give_up_released"), "job", SLOT
        )
    assert "ix_timer_slots_unfinished" in str(plan)
