"""Interrupted claims on real PostgreSQL (issue 21, finding 5): a database blip, a cancelled
run or an expired lease ends a claim without a verdict; that costs the row no attempt until
its interruption allowance is spent, while real failed attempts still climb the ladder."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from db import scheduler as repo
from db.connector import Connection, DatabaseUnavailable, connection
from db.scheduler import ClaimedRow
from devkit.harness.automation import (
    LEASE,
    T0,
    cleanup,
    make_runtime,
    metric,
    outbox,
    row,
    seed,
)
from devkit.harness.automation import (
    runner as make_runner,
)
from devkit.wait import eventually
from streams.contracts.automation import AutomationType
from streams.domain.automation.rules import (
    DEFAULT_INTERRUPTION_ALLOWANCE,
    DEFAULT_INTERRUPTION_DELAY,
)
from streams.runtime import Runtime
from streams.slices.automation.handlers import AutomationHandler, HandlerRegistry, Outcome
from streams.slices.automation.metrics import AutomationMetrics
from streams.slices.automation.runner import AutomationRunner, RunnerConfig
from streams.slices.automation.support import SupportAction, put_back, row_view, status_section
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

# Long enough for an expired lease and the ladder's longest step between two rounds.
ROUND = timedelta(hours=2)


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    yield rt
    await rt.close()


class Scripted:
    """The real reminder handler, with a fault injected on the calls its script names:
    ``blip`` — PostgreSQL terminates the runner's execution session (pg_terminate_backend,
    waited for) before the handler reads on it; ``blip+lock`` — the same, with another
    session holding the batch's rows locked so the hand-back cannot write either;
    ``fail`` — the handler raises a plain (non-database) error: a real failed attempt."""

    automation_type = AutomationType.REMINDER
    daily_retry = False

    def __init__(self, runtime: Runtime, admin: asyncpg.Pool, script: Sequence[str]) -> None:
        inner = make_runner(runtime).handlers.get(AutomationType.REMINDER.value)
        assert inner is not None
        self.inner: AutomationHandler = inner
        self.admin = admin
        self.script = list(script)
        self.calls = 0
        self.locker: asyncpg.Connection | None = None

    async def revalidate(
        self, conn: Connection, rows: Sequence[ClaimedRow]
    ) -> Mapping[int, Outcome]:
        step = self.script[self.calls] if self.calls < len(self.script) else "ok"
        self.calls += 1
        if step == "fail":
            raise RuntimeError("downstream said no")
        if step == "blip+lock":
            self.locker = await self.admin.acquire()
            await self.locker.execute("BEGIN")
            await self.locker.execute(
                "SELECT 1 FROM automation.scheduler WHERE scheduler_id = ANY($1::bigint[]) "
                "FOR UPDATE",
                [r.scheduler_id for r in rows],
            )
        if step.startswith("blip"):
            pid = conn.get_server_pid()
            assert await self.admin.fetchval("SELECT pg_terminate_backend($1, 10000)", pid)
        return await self.inner.revalidate(conn, rows)

    async def unlock(self) -> None:
        assert self.locker is not None
        await self.locker.execute("ROLLBACK")
        await self.admin.release(self.locker)
        self.locker = None


def scripted_runner(runtime: Runtime, handler: Scripted, **config: Any) -> AutomationRunner:
    return AutomationRunner(
        runtime,
        HandlerRegistry([handler]),
        RunnerConfig(lease=LEASE, **config),
    )


async def drive(runtime: Runtime, run: AutomationRunner, rounds: int) -> tuple[int, datetime]:
    """What the timers do, ``rounds`` times ``ROUND`` apart: stale cleanup, then a runner run
    (a run the database fails counts as a failed timer run). Returns the failed runs."""
    now, failed = T0, 0
    for _ in range(rounds):
        await cleanup(runtime).run_once(RunContext.at(now, clock=runtime.clock))
        try:
            await run.run_once(RunContext.at(now, clock=run.clock))
        except DatabaseUnavailable:
            failed += 1
        now += ROUND
    return failed, now


async def test_four_database_blips_mid_run_cost_no_attempt_and_dispatch_once(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    [c] = await seed(pool, 1)
    handler = Scripted(runtime, pool, ["blip"] * 4)
    # Enough rounds for the old behaviour (each blip an attempt) to reach support hold.
    failed, _ = await drive(runtime, scripted_runner(runtime, handler), 10)
    r = await row(pool, c.key)
    assert (r["status_id"], r["retry_count"], r["is_on_support_hold"]) == ("Completed", 0, False)
    assert (failed, handler.calls) == (4, 5)
    assert (r["interrupted_count"], r["failure_reason_code"], r["last_error"]) == (4, None, None)
    assert r["dispatch_result_json"]["Attempt"] == 1
    events = [e for e in await outbox(pool) if e["key"] == c.key]
    assert len(events) == 1
    assert (
        metric(runtime, "automation_scheduler_interrupted_total", path="hand_back", charged="false")
        == 4
    )
    assert metric(runtime, "automation_scheduler_stale_rescued_total") == 0
    section = await status_section(runtime, runtime.metrics.family(AutomationMetrics))()
    assert (section["interrupted"], section["interrupted_charged"]) == (4, 0)
    assert (
        metric(
            runtime, "automation_scheduler_outcomes_total", outcome="failed", reason="HandlerError"
        )
        == 0
    )


async def test_a_handed_back_row_is_due_again_after_the_interruption_delay(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    [c] = await seed(pool, 1)
    run = scripted_runner(runtime, Scripted(runtime, pool, ["blip"]))
    with pytest.raises(DatabaseUnavailable):
        await run.run_once(RunContext.at(T0, clock=run.clock))
    r = await row(pool, c.key)
    assert (r["status_id"], r["retry_count"], r["interrupted_count"]) == ("Pending", 0, 1)
    assert (r["next_retry_on"], r["last_interrupted_on"]) == (T0 + DEFAULT_INTERRUPTION_DELAY, T0)
    assert r["processing_lease_expires_on"] is None
    assert await run.claim(pool, T0 + DEFAULT_INTERRUPTION_DELAY - timedelta(seconds=1)) == []
    result = await run.run_once(RunContext.at(T0 + DEFAULT_INTERRUPTION_DELAY, clock=run.clock))
    assert (result.completed, result.failed) == (1, 0)


async def test_real_failures_still_climb_the_ladder_to_hold_between_blips(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    [c] = await seed(pool, 1)
    handler = Scripted(runtime, pool, ["blip", "fail"] * 4)
    failed, _ = await drive(runtime, scripted_runner(runtime, handler), 10)
    assert (failed, handler.calls) == (4, 8)  # held after the fourth failure: no ninth call
    r = await row(pool, c.key)
    assert (r["status_id"], r["is_on_support_hold"]) == ("Failed", True)
    assert (r["retry_count"], r["interrupted_count"], r["failure_reason_code"]) == (
        4,
        4,
        "HandlerError",
    )
    assert await outbox(pool) == []


async def test_a_hand_back_the_database_refuses_leaves_the_row_to_cleanup_without_an_attempt(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    [c] = await seed(pool, 1)
    handler = Scripted(runtime, pool, ["blip+lock"])
    run = scripted_runner(runtime, handler, hand_back_timeout=timedelta(seconds=0.5))
    with pytest.raises(DatabaseUnavailable):
        await run.run_once(RunContext.at(T0, clock=run.clock))
    await handler.unlock()
    assert metric(runtime, "automation_scheduler_hand_back_failed_total") == 1
    assert (await row(pool, c.key))["status_id"] == "Processing"
    expired = T0 + LEASE + timedelta(seconds=1)
    result = await cleanup(runtime).run_once(RunContext.at(expired, clock=runtime.clock))
    assert (result.rescued, result.charged, result.held) == (1, 0, 0)
    r = await row(pool, c.key)
    assert (r["status_id"], r["retry_count"], r["interrupted_count"]) == ("Pending", 0, 1)
    assert (r["failure_reason_code"], r["next_retry_on"]) == (
        None,
        expired + DEFAULT_INTERRUPTION_DELAY,
    )
    assert (
        metric(
            runtime, "automation_scheduler_interrupted_total", path="lease_expired", charged="false"
        )
        == 1
    )
    done = await run.run_once(RunContext.at(expired + DEFAULT_INTERRUPTION_DELAY, clock=run.clock))
    assert done.completed == 1


class Gate:
    """A handler that waits inside the execution transaction until the run is cancelled."""

    automation_type = AutomationType.REMINDER
    daily_retry = False

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def revalidate(
        self, conn: Connection, rows: Sequence[ClaimedRow]
    ) -> Mapping[int, Outcome]:
        self.entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_cancelled_run_hands_its_batch_back_without_an_attempt(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    [c] = await seed(pool, 1)
    gate = Gate()
    task = asyncio.create_task(
        make_runner(runtime, HandlerRegistry([gate])).run_once(
            RunContext.at(T0, clock=runtime.clock)
        )
    )
    await asyncio.wait_for(gate.entered.wait(), 10)
    task.cancel()  # what stop() and the max duration do to a run
    with pytest.raises(asyncio.CancelledError):
        await task
    r = await row(pool, c.key)
    assert (r["status_id"], r["retry_count"], r["interrupted_count"]) == ("Pending", 0, 1)
    assert r["next_retry_on"] == T0 + DEFAULT_INTERRUPTION_DELAY
    assert await outbox(pool) == []


async def test_a_row_that_never_gets_a_verdict_is_held_after_its_allowance_and_the_ladder(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    """A row whose execution kills its worker every time (SIGKILL: no hand-back, the lease
    expires): the first interruptions are free, then each one is an attempt on the ladder."""
    [c] = await seed(pool, 1)
    claimer, rescuer = make_runner(runtime), cleanup(runtime)
    now, allowance = T0, DEFAULT_INTERRUPTION_ALLOWANCE
    waits = [DEFAULT_INTERRUPTION_DELAY] * allowance + [
        timedelta(minutes=5),
        timedelta(minutes=15),
        timedelta(hours=1),
    ]
    for n, wait in enumerate(waits, start=1):
        assert len(await claimer.claim(pool, now)) == 1
        now += LEASE + timedelta(seconds=1)
        assert (
            await rescuer.run_once(RunContext.at(now, clock=rescuer.runtime.clock))
        ).rescued == 1
        r = await row(pool, c.key)
        assert (r["status_id"], r["interrupted_count"], r["next_retry_on"]) == (
            "Pending",
            n,
            now + wait,
        )
        assert r["retry_count"] == max(0, n - allowance)
        assert r["failure_reason_code"] == (None if n <= allowance else "LeaseExpired")
        now += wait
    assert len(await claimer.claim(pool, now)) == 1
    now += LEASE + timedelta(seconds=1)
    result = await rescuer.run_once(RunContext.at(now, clock=rescuer.runtime.clock))
    assert (result.rescued, result.charged, result.held) == (1, 1, 1)
    r = await row(pool, c.key)
    assert (r["status_id"], r["retry_count"], r["interrupted_count"], r["is_on_support_hold"]) == (
        "Failed",
        4,
        allowance + 4,
        True,
    )
    assert await claimer.claim(pool, now + timedelta(days=30)) == []
    # Support sees both counters on the held row.
    async with connection(pool) as conn:
        [held] = await repo.list_held(conn, 10)
    view = row_view(held)
    assert (view["attempts"], view["interruptions"], view["hold_reason"]) == (
        4,
        allowance + 4,
        "LeaseExpired",
    )
    charged = metric(
        runtime, "automation_scheduler_interrupted_total", path="lease_expired", charged="true"
    )
    assert charged == 4
    # release keeps the spent allowance: the next interruption is an attempt, held again.
    await put_back(pool, c.key, SupportAction.RELEASE, now)
    assert len(await claimer.claim(pool, now)) == 1
    now += LEASE + timedelta(seconds=1)
    assert (await rescuer.run_once(RunContext.at(now, clock=rescuer.runtime.clock))).held == 1
    # retry-key restarts both counters: the next interruption is free again.
    put = await put_back(pool, c.key, SupportAction.RETRY_KEY, now)
    assert put is not None and (put.retry_count, put.interrupted_count) == (0, 0)
    assert len(await claimer.claim(pool, now)) == 1
    now += LEASE + timedelta(seconds=1)
    assert (await rescuer.run_once(RunContext.at(now, clock=rescuer.runtime.clock))).charged == 0
    r = await row(pool, c.key)
    assert (r["status_id"], r["retry_count"], r["interrupted_count"]) == ("Pending", 0, 1)


async def test_a_second_cancellation_does_not_abandon_the_hand_back(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    """stop() cancels a run, then cancels it again after its grace: the hand-back write goes
    on shielded and lands once the row lock it waits for is gone."""
    [c] = await seed(pool, 1)
    gate = Gate()
    task = asyncio.create_task(
        make_runner(runtime, HandlerRegistry([gate])).run_once(
            RunContext.at(T0, clock=runtime.clock)
        )
    )
    await asyncio.wait_for(gate.entered.wait(), 10)
    async with pool.acquire() as locker:
        tx = locker.transaction()
        await tx.start()
        await locker.execute(
            "SELECT 1 FROM automation.scheduler WHERE scheduler_key = $1 FOR UPDATE", c.key
        )
        task.cancel()
        # The signal: the hand-back's UPDATE waits on the row lock.
        await eventually(
            lambda: pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE '%UPDATE automation.scheduler%'"
            ),
            timeout=10,
            what="the hand-back waiting on the row lock",
        )
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await row(pool, c.key))["status_id"] == "Processing"
        await tx.rollback()
    r = await eventually(
        lambda: row(pool, c.key),
        until=lambda r: r["status_id"] != "Processing",
        timeout=10,
        what="the shielded hand-back to land",
    )
    assert (r["status_id"], r["retry_count"], r["interrupted_count"]) == ("Pending", 0, 1)


async def test_a_run_cancelled_while_its_batch_commits_counts_what_it_committed(
    pool: asyncpg.Pool, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The max duration or a stop cancels a run just as its batch's transaction commits: the
    batch ends (committed) before the run stops, so the rows it completed are counted
    (automation_scheduler_outcomes_total, the run's result) as they are on the topic."""
    await seed(pool, 3)
    run = make_runner(runtime)
    task: asyncio.Task[Any] | None = None
    last_write = repo.retry  # the last statement of the execution transaction

    async def then_cancel(*args: Any, **kwargs: Any) -> Any:
        out = await last_write(*args, **kwargs)
        assert task is not None
        task.cancel()  # delivered at the next await: the transaction's COMMIT
        return out

    monkeypatch.setattr(repo, "retry", then_cancel)
    task = asyncio.create_task(run.run_once(RunContext.at(T0, clock=runtime.clock)))
    with pytest.raises(asyncio.CancelledError):
        await task
    completed = await pool.fetchval(
        "SELECT count(*) FROM automation.scheduler WHERE status_id = 'Completed'"
    )
    counted = metric(runtime, "automation_scheduler_outcomes_total", outcome="completed", reason="")
    assert (completed, counted, len(await outbox(pool))) == (3, 3, 3)
