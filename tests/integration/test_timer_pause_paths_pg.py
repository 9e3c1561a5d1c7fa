"""Every path of a paused cluster-once job obeys the pause, on real PostgreSQL: a failed slot's
retry, a slot handed back by a stopping worker, the takeover of a dead claimant's slot, a
manual run (``timers run``) and a backfill. A held slot is not lost: its row is untouched
while paused, and after resume the retry or takeover still happens. An operator may run a
paused job's slot only by saying so (``ignore_pause``)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from db import timer_pauses
from db.connector import transaction
from db.timers import TimerRepository
from streams.clock import ManualClock
from streams.slices.slice import TimerContext
from streams.timers import HandBack, Mode, Schedule, TimerRegistry
from streams.timers.context import RunContext
from streams.timers.control import backfill
from streams.timers.manual import EXIT_PAUSED, exit_code, report

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
SLOT = T0 + timedelta(hours=1)
BACKOFF = timedelta(seconds=30)
MAX = timedelta(seconds=30)


class Handler:
    """Fails (or hands back) its first ``bad`` runs, then succeeds; records every run."""

    def __init__(self, bad: int = 0, *, hand_back: bool = False) -> None:
        self.bad = bad
        self.hand_back = hand_back
        self.calls: list[datetime] = []

    async def run_once(self, ctx: RunContext) -> str:
        self.calls.append(ctx.as_of)
        if len(self.calls) <= self.bad:
            if self.hand_back:
                raise HandBack
            raise RuntimeError("boom")
        return "done"


def worker(pool: asyncpg.Pool, clock: ManualClock, name: str, handler: Handler) -> TimerRegistry:
    store = TimerRepository(pool)
    reg = TimerRegistry(store=store, pauses=store, clock=clock, environ={}, worker_id=name)
    reg.register(
        Schedule(
            name="job",
            interval=timedelta(hours=1),
            handler=handler,
            max_duration=MAX,
            mode=Mode.CLUSTER_ONCE,
            retry_attempts=3,
            retry_backoff=BACKOFF,
        )
    )
    return reg


async def set_pause(pool: asyncpg.Pool, paused: bool, now: datetime) -> None:
    async with transaction(pool) as conn:
        change = timer_pauses.pause if paused else timer_pauses.resume
        await change(conn, "job", "alice", "bad thresholds deployed", now)


async def slot_row(pool: asyncpg.Pool) -> dict[str, Any]:
    row = await pool.fetchrow(
        "SELECT claimed_by, result, attempts, handbacks, takeovers,"
        " finished_at IS NOT NULL AS finished, released_at IS NOT NULL AS released"
        " FROM ops.timer_slots WHERE name = 'job' AND slot = $1",
        SLOT,
    )
    assert row is not None
    return dict(row)


def counts(reg: TimerRegistry) -> dict[str, int]:
    [view] = reg.list()
    return dict(view["counts"])


async def released_then_paused(
    pool: asyncpg.Pool, clock: ManualClock, first: Handler
) -> dict[str, Any]:
    """w1 runs SLOT, which fails or hands back (the slot is released); then the job is
    paused. The row as it was released."""
    w1 = worker(pool, clock, "w1", first)
    await w1.run_due()
    clock.set(SLOT)
    # (A hand-back is released for at once: w1's own look runs it and hands it back again.)
    runs = await w1.run_due()
    assert {r.result for r in runs} <= {"failed", "cancelled"} and runs
    row = await slot_row(pool)
    assert (row["finished"], row["released"]) == (False, True)
    await set_pause(pool, True, clock.now())
    return row


@pytest.mark.parametrize("how", ["retry", "hand_back"])
async def test_a_released_slot_is_not_run_while_paused_and_runs_after_resume(
    pool: asyncpg.Pool, how: str
) -> None:
    clock = ManualClock(T0 + timedelta(seconds=1))
    first = Handler(1) if how == "retry" else Handler(100, hand_back=True)
    before = await released_then_paused(pool, clock, first)
    second = Handler()
    w2 = worker(pool, clock, "w2", second)
    # A hand-back is due at once, a retry after its backoff: either way held now.
    await w2.run_due()
    assert second.calls == []
    # Its next attempt is due (past the backoff): the pause holds it, on every worker.
    clock.set(SLOT + BACKOFF + timedelta(seconds=1))
    records = await w2.run_due()
    assert second.calls == [], f"the {how} of a paused job ran"
    assert [(r.slot, r.kind, r.result) for r in records] == [(SLOT, "reclaimed", "paused")]
    assert counts(w2)["paused"] == (1 if how == "retry" else 2)
    assert await slot_row(pool) == before  # untouched: not claimed, no attempt counted
    # Not lost: resumed, the next look runs it (same slot, its own as_of).
    await set_pause(pool, False, clock.now())
    clock.set(SLOT + BACKOFF + timedelta(minutes=1))
    [retry] = await w2.run_due()
    assert (retry.slot, retry.kind, retry.result) == (SLOT, "reclaimed", "ok")
    assert second.calls == [SLOT]
    row = await slot_row(pool)
    assert (row["claimed_by"], row["finished"], row["result"]) == ("w2", True, "ok")


async def test_a_dead_claimants_slot_is_not_taken_over_while_paused(pool: asyncpg.Pool) -> None:
    clock = ManualClock(T0 + timedelta(seconds=1))
    store = TimerRepository(pool)
    handler = Handler()
    w2 = worker(pool, clock, "w2", handler)
    await w2.run_due()
    # A worker claimed SLOT and died mid-run; then the job was paused.
    clock.set(SLOT)
    assert await store.claim_slot("job", SLOT, "dead", "run-dead", SLOT + MAX)
    await set_pause(pool, True, clock.now())
    clock.set(SLOT + MAX + timedelta(seconds=1))
    records = await w2.run_due()
    assert handler.calls == [], "a paused job's slot was taken over and run"
    # The on-time run and the takeover alike.
    assert [(r.slot, r.kind, r.result) for r in records] == [
        (SLOT, "on_time", "paused"),
        (SLOT, "reclaimed", "paused"),
    ]
    row = await slot_row(pool)
    assert (row["claimed_by"], row["finished"], row["takeovers"]) == ("dead", False, 0)
    await set_pause(pool, False, clock.now())
    clock.set(SLOT + MAX + timedelta(minutes=1))
    [taken] = await w2.run_due()
    assert (taken.slot, taken.kind, taken.result) == (SLOT, "reclaimed", "ok")
    row = await slot_row(pool)
    assert (row["claimed_by"], row["finished"], row["takeovers"]) == ("w2", True, 1)


@pytest.mark.parametrize("rerun", [False, True])
async def test_a_manual_run_of_a_paused_job_is_refused_unless_asked_to_ignore_it(
    pool: asyncpg.Pool, rerun: bool
) -> None:
    clock = ManualClock(SLOT + timedelta(minutes=5))
    handler = Handler()
    operator = worker(pool, clock, "cli", handler)
    await set_pause(pool, True, clock.now())
    refused = await operator.run_slot("job", SLOT, rerun=rerun)
    assert refused.result == "paused" and handler.calls == []
    assert exit_code(refused) == EXIT_PAUSED
    assert "job is paused cluster-wide" in report(refused)[1]
    assert "--ignore-pause" in report(refused)[1]
    assert await pool.fetchval("SELECT count(*) FROM ops.timer_slots") == 0
    ran = await operator.run_slot("job", SLOT, rerun=rerun, ignore_pause=True)
    assert ran.result == "ok" and handler.calls == [SLOT]


async def test_a_backfill_of_a_paused_job_runs_no_day(pool: asyncpg.Pool) -> None:
    clock = ManualClock(datetime(2026, 6, 10, 12, 0, tzinfo=UTC))
    handler = Handler()
    store = TimerRepository(pool)
    reg = TimerRegistry(store=store, pauses=store, clock=clock, environ={}, worker_id="cli")
    reg.register(
        Schedule(
            name="job",
            cron="30 0 * * *",
            handler=handler,
            max_duration=MAX,
            mode=Mode.CLUSTER_ONCE,
        )
    )
    ctx = TimerContext(runtime=None, registry=reg)  # type: ignore[arg-type]
    await set_pause(pool, True, clock.now())
    days = [date(2026, 6, 1), date(2026, 6, 2)]
    out: list[str] = []
    assert await backfill(ctx, "job", days, out) != 0
    assert handler.calls == []
    assert any("paused" in line for line in out), out
    assert await pool.fetchval("SELECT count(*) FROM ops.timer_slots") == 0
    forced: list[str] = []
    assert await backfill(ctx, "job", days, forced, ignore_pause=True) == 0
    assert [c.date() for c in handler.calls] == days


async def test_the_cli_refuses_a_paused_job_naming_who_paused_it_and_why(
    database_url: str, pool: asyncpg.Pool
) -> None:
    async with transaction(pool) as conn:
        await timer_pauses.pause(
            conn, "outbox-retention", "alice", "bad thresholds deployed", datetime.now(UTC)
        )
    env = {**os.environ, "DATABASE_URL": database_url, "WORKER_TIMER_PROCESS": "false"}
    yesterday = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()
    for args in (["run"], ["backfill", "--from", yesterday, "--to", yesterday]):
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "streams", "timers", args[0], "outbox-retention", *args[1:]],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == EXIT_PAUSED, (done.stdout, done.stderr)
        assert "outbox-retention is paused cluster-wide" in done.stdout
        assert "paused by alice at " in done.stdout
        assert "bad thresholds deployed" in done.stdout
    assert await pool.fetchval("SELECT count(*) FROM ops.timer_slots") == 0
