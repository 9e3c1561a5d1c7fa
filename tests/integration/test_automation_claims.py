"""Claims, leases, fencing and the backoff ladder on real PostgreSQL, with injected time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime, timedelta

import asyncpg
import pytest

from db import scheduler as repo
from db.connector import Connection, transaction
from db.scheduler import ClaimedRow
from devkit.harness.automation import (
    LEASE,
    T0,
    cleanup,
    make_runtime,
    metric,
    outbox,
    row,
    runner,
    seed,
)
from streams.contracts.automation import AutomationType
from streams.domain.automation.revalidation import VALID
from streams.domain.automation.rules import (
    DEFAULT_INTERRUPTION_ALLOWANCE,
    DEFAULT_INTERRUPTION_DELAY,
)
from streams.runtime import Runtime
from streams.slices.automation.handlers import HandlerRegistry, Outcome
from streams.slices.automation.runner import AutomationRunner, RunnerConfig
from streams.slices.automation.support import SupportAction, put_back
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration


@pytest.fixture
async def runtimes(database_url: str) -> AsyncIterator[list[Runtime]]:
    made = [make_runtime(database_url) for _ in range(3)]
    yield made
    for rt in made:
        await rt.close()


class Gate:
    """A handler that stops inside the execution transaction until released (a paused worker)."""

    automation_type = AutomationType.REMINDER
    daily_retry = False

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def revalidate(
        self, conn: Connection, rows: Sequence[ClaimedRow]
    ) -> Mapping[int, Outcome]:
        self.entered.set()
        await self.release.wait()
        return {r.scheduler_id: VALID for r in rows}


class Broken:
    automation_type = AutomationType.REMINDER
    daily_retry = False

    async def revalidate(
        self, conn: Connection, rows: Sequence[ClaimedRow]
    ) -> Mapping[int, Outcome]:
        raise RuntimeError("downstream said no")


async def test_claim_takes_only_due_claimable_rows_and_stamps_lease_and_token(
    pool: asyncpg.Pool, runtimes: list[Runtime]
) -> None:
    due, later, backing_off, held = (
        (await seed(pool, 1))
        + (await seed(pool, 1, T0 + timedelta(minutes=1)))
        + (await seed(pool, 2))
    )
    await pool.execute(
        "UPDATE automation.scheduler SET next_retry_on = $2 WHERE scheduler_key = $1",
        backing_off.key,
        T0 + timedelta(seconds=1),
    )
    await pool.execute(
        "UPDATE automation.scheduler SET is_on_support_hold = true WHERE scheduler_key = $1",
        held.key,
    )
    claimed = await runner(runtimes[0]).claim(pool, T0)
    assert [c.scheduler_key for c in claimed] == [due.key]
    r = await row(pool, due.key)
    assert (r["status_id"], r["processing_lease_expires_on"], r["version"]) == (
        "Processing",
        T0 + LEASE,
        2,
    )
    assert claimed[0].token == 2
    # NextRetryOn passed, ScheduledOn passed: both come due; the held row never does.
    again = await runner(runtimes[0]).claim(pool, T0 + timedelta(minutes=1))
    assert {c.scheduler_key for c in again} == {later.key, backing_off.key}
    assert await runner(runtimes[0]).claim(pool, T0 + timedelta(days=1)) == []


async def test_two_workers_racing_for_one_row_one_claim_wins(
    database_url: str, pool: asyncpg.Pool, runtimes: list[Runtime]
) -> None:
    [c] = await seed(pool, 1)
    # Deterministic interleaving: A has locked and updated the row, not yet committed.
    a = await asyncpg.connect(database_url)
    try:
        tx = a.transaction()
        await tx.start()
        first = await repo.claim(a, T0, 10, 60)
        assert [r.scheduler_key for r in first] == [c.key]
        assert await runner(runtimes[1]).claim(pool, T0) == []  # SKIP LOCKED passes it over
        await tx.commit()
    finally:
        await a.close()
    assert await runner(runtimes[1]).claim(pool, T0) == []  # Processing: nothing to claim
    # Free-running races: each of 50 rows is claimed by exactly one of two workers.
    await seed(pool, 50)
    batches = await asyncio.gather(
        *(runner(rt, batch_size=5).claim(pool, T0) for rt in runtimes[1:] for _ in range(10))
    )
    keys = [r.scheduler_key for batch in batches for r in batch]
    assert len(keys) == len(set(keys)) == 50


async def test_paused_worker_past_its_lease_is_fenced_and_one_event_is_written(
    pool: asyncpg.Pool, runtimes: list[Runtime]
) -> None:
    [c] = await seed(pool, 1)
    gate = Gate()
    paused = runner(runtimes[0], HandlerRegistry([gate]))
    task = asyncio.create_task(paused.run_once(RunContext.at(T0, clock=paused.clock)))
    await asyncio.wait_for(gate.entered.wait(), 10)
    assert (await row(pool, c.key))["status_id"] == "Processing"

    # The lease runs out; cleanup puts the row back (an interruption, no attempt); another
    # worker runs it.
    t1 = T0 + LEASE + timedelta(seconds=1)
    rescued = await cleanup(runtimes[1]).run_once(RunContext.at(t1, clock=runtimes[1].clock))
    assert (rescued.rescued, rescued.charged) == (1, 0)
    other = await runner(runtimes[1]).run_once(
        RunContext.at(t1 + DEFAULT_INTERRUPTION_DELAY, clock=runtimes[1].clock)
    )
    assert (other.completed, other.fenced) == (1, 0)

    gate.release.set()
    late = await asyncio.wait_for(task, 10)
    assert (late.completed, late.fenced) == (0, 1)
    assert metric(runtimes[0], "automation_scheduler_fenced_total", transition="Completed") == 1
    events = [e for e in await outbox(pool) if e["key"] == c.key]
    assert len(events) == 1
    r = await row(pool, c.key)
    assert (r["status_id"], r["retry_count"], r["interrupted_count"]) == ("Completed", 0, 1)
    assert r["failure_reason_code"] is None


async def test_each_step_of_the_ladder_after_expired_leases_then_hold(
    pool: asyncpg.Pool, runtimes: list[Runtime]
) -> None:
    [c] = await seed(pool, 1)
    # Its free interruptions spent (test_automation_interruptions.py walks through them), each
    # expired lease is an attempt.
    await pool.execute(
        "UPDATE automation.scheduler SET interrupted_count = $2 WHERE scheduler_key = $1",
        c.key,
        DEFAULT_INTERRUPTION_ALLOWANCE,
    )
    claimer, rescuer = runner(runtimes[0]), cleanup(runtimes[1])
    now = T0
    for step, wait in enumerate([timedelta(minutes=5), timedelta(minutes=15), timedelta(hours=1)]):
        assert len(await claimer.claim(pool, now)) == 1
        # Not before the lease expires.
        assert (
            await rescuer.run_once(
                RunContext.at(now + LEASE - timedelta(seconds=1), clock=rescuer.runtime.clock)
            )
        ).rescued == 0
        now = now + LEASE + timedelta(seconds=1)
        assert (
            await rescuer.run_once(RunContext.at(now, clock=rescuer.runtime.clock))
        ).rescued == 1
        r = await row(pool, c.key)
        assert (r["status_id"], r["retry_count"], r["next_retry_on"]) == (
            "Pending",
            step + 1,
            now + wait,
        )
        assert r["failure_reason_code"] == "LeaseExpired" and not r["is_on_support_hold"]
        assert await claimer.claim(pool, now + wait - timedelta(seconds=1)) == []
        now = now + wait
    assert len(await claimer.claim(pool, now)) == 1
    now = now + LEASE + timedelta(seconds=1)
    result = await rescuer.run_once(RunContext.at(now, clock=rescuer.runtime.clock))
    assert (result.rescued, result.held) == (1, 1)
    r = await row(pool, c.key)
    assert (r["status_id"], r["retry_count"], r["is_on_support_hold"], r["next_retry_on"]) == (
        "Failed",
        4,
        True,
        None,
    )
    assert await claimer.claim(pool, now + timedelta(days=30)) == []
    assert metric(runtimes[1], "automation_scheduler_stale_rescued_total") == 4


async def test_handler_failures_follow_the_same_ladder_with_their_reason(
    pool: asyncpg.Pool, runtimes: list[Runtime]
) -> None:
    [c] = await seed(pool, 1)
    broken = runner(runtimes[0], HandlerRegistry([Broken()]))
    now = T0
    for n, wait in enumerate([timedelta(minutes=5), timedelta(minutes=15), timedelta(hours=1)]):
        result = await broken.run_once(RunContext.at(now, clock=broken.clock))
        assert (result.failed, result.completed) == (1, 0)
        r = await row(pool, c.key)
        assert (r["status_id"], r["retry_count"], r["next_retry_on"]) == (
            "Pending",
            n + 1,
            now + wait,
        )
        assert (r["failure_reason_code"], r["last_error"]) == ("HandlerError", "RuntimeError")
        now = now + wait
    result = await broken.run_once(RunContext.at(now, clock=broken.clock))
    assert (result.failed, result.held) == (1, 1)
    r = await row(pool, c.key)
    assert (r["status_id"], r["is_on_support_hold"]) == ("Failed", True)
    assert (
        metric(
            runtimes[0],
            "automation_scheduler_outcomes_total",
            outcome="failed",
            reason="HandlerError",
        )
        == 4
    )
    assert await outbox(pool) == []


async def test_a_type_without_handler_fails_with_no_handler(
    pool: asyncpg.Pool, runtimes: list[Runtime]
) -> None:
    [c] = await seed(pool, 1)
    result = await runner(runtimes[0], HandlerRegistry()).run_once(
        RunContext.at(T0, clock=runtimes[0].clock)
    )
    assert result.failed == 1
    assert (await row(pool, c.key))["failure_reason_code"] == "NoHandler"


async def hold(pool: asyncpg.Pool, runtime: Runtime, now: datetime) -> str:
    [c] = await seed(pool, 1)
    broken = runner(runtime, HandlerRegistry([Broken()]))
    for _ in range(4):
        await broken.run_once(RunContext.at(now, clock=broken.clock))
        now += timedelta(hours=2)
    assert (await row(pool, c.key))["is_on_support_hold"]
    return c.key


async def test_release_gives_one_more_attempt_keeping_the_ladder_position(
    pool: asyncpg.Pool, runtimes: list[Runtime]
) -> None:
    key = await hold(pool, runtimes[0], T0)
    now = T0 + timedelta(days=1)
    released = await put_back(pool, key, SupportAction.RELEASE, now)
    assert released is not None
    assert (released.status_id, released.is_on_support_hold, released.retry_count) == (
        "Pending",
        False,
        4,
    )
    assert (released.support_action, released.support_action_on, released.support_action_count) == (
        "release",
        now,
        1,
    )
    assert released.failure_reason_code == "HandlerError"  # history kept
    # Due at once; one more failure holds it again straight away.
    await runner(runtimes[0], HandlerRegistry([Broken()])).run_once(
        RunContext.at(now, clock=runtimes[0].clock)
    )
    r = await row(pool, key)
    assert (r["status_id"], r["retry_count"], r["is_on_support_hold"]) == ("Failed", 5, True)
    assert await put_back(pool, "reminder:nope", SupportAction.RELEASE, now) is None


async def test_retry_key_restarts_the_ladder_and_a_healthy_run_completes(
    pool: asyncpg.Pool, runtimes: list[Runtime]
) -> None:
    key = await hold(pool, runtimes[0], T0)
    now = T0 + timedelta(days=1)
    put = await put_back(pool, key, SupportAction.RETRY_KEY, now)
    assert put is not None and (put.retry_count, put.support_action) == (0, "retry-key")
    result = await runner(runtimes[1]).run_once(RunContext.at(now, clock=runtimes[1].clock))
    assert result.completed == 1
    r = await row(pool, key)
    assert (r["status_id"], r["support_action_count"]) == ("Completed", 1)
    # Not on hold any more: a second release finds nothing to put back.
    assert await put_back(pool, key, SupportAction.RELEASE, now) is None
    async with transaction(pool) as conn:
        assert await repo.list_held(conn, 10) == []


class Overlap:
    """A handler that counts the batches inside their execution transaction at once. A lane
    starts once a batch has come back full, so the batches after the first wait (bounded by
    ``patience``) until another has arrived beside them."""

    automation_type = AutomationType.REMINDER
    daily_retry = False

    def __init__(self, patience: float) -> None:
        self.patience = patience
        self.calls = self.running = self.peak = 0
        self.second = asyncio.Event()

    async def revalidate(
        self, conn: Connection, rows: Sequence[ClaimedRow]
    ) -> Mapping[int, Outcome]:
        self.calls += 1
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            if self.running > 1:
                self.second.set()
            elif self.calls > 1 and not self.second.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.second.wait(), self.patience)
            return {r.scheduler_id: VALID for r in rows}
        finally:
            self.running -= 1


@pytest.mark.parametrize(("lanes", "patience", "peak"), [(2, 30.0, 2), (1, 0.3, 1)])
async def test_a_backlog_is_drained_by_two_batches_at_once_each_row_once(
    pool: asyncpg.Pool, runtimes: list[Runtime], lanes: int, patience: float, peak: int
) -> None:
    """After a full batch a second lane claims the next rows while the first is still in its
    execution transaction (claims are committed leases: the lanes never share a row)."""
    candidates = await seed(pool, 25)
    handler = Overlap(patience)
    rt = runtimes[0]
    r = AutomationRunner(
        rt, HandlerRegistry([handler]), RunnerConfig(batch_size=10, lease=LEASE, lanes=lanes)
    )
    result = await r.run_once(RunContext.at(T0 + timedelta(seconds=1), clock=rt.clock))
    assert (handler.peak, result.completed, result.fenced) == (peak, 25, 0)
    keys = [e["key"] for e in await outbox(pool)]
    assert sorted(keys) == sorted(c.key for c in candidates)  # each row's record, once
    completed = await pool.fetchval(
        "SELECT count(*) FROM automation.scheduler WHERE status_id = 'Completed'"
    )
    assert completed == 25
