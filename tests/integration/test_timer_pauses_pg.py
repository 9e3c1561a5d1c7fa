"""Timers paused cluster-wide at runtime (ops.timer_pauses): two registries on one database,
as two workers are; pausing through one stops the runs of both, resuming restarts them, and
the skipped runs are counted as paused, never as failures; pause and resume are audited."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from db import timer_pauses
from db.connector import transaction
from db.timers import TimerRepository
from streams.clock import ManualClock
from streams.timers import Mode, Schedule, TimerRegistry
from streams.timers.context import RunContext
from streams.timers.metrics import TimerMetrics
from streams.timers.pauses import PauseCheck
from streams.timers.schedule import resolve
from streams.timers.state import ScheduleState

pytestmark = pytest.mark.integration

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[datetime] = []

    async def run_once(self, ctx: RunContext) -> None:
        self.calls.append(ctx.as_of)


def _worker(
    pool: asyncpg.Pool, clock: ManualClock, i: int
) -> tuple[TimerRegistry, Recorder, CollectorRegistry]:
    prom = CollectorRegistry()
    store = TimerRepository(pool)
    reg = TimerRegistry(
        store=store,
        pauses=store,
        clock=clock,
        environ={},
        worker_id=f"w{i}",
        metrics=TimerMetrics(prom),
    )
    handler = Recorder()
    reg.register(
        Schedule(
            name="job",
            interval=timedelta(minutes=1),
            handler=handler,
            max_duration=timedelta(seconds=30),
            mode=Mode.CLUSTER_ONCE,
        )
    )
    reg.register(
        Schedule(
            name="beat",
            interval=timedelta(minutes=1),
            handler=Recorder(),
            max_duration=timedelta(seconds=5),
            mode=Mode.EVERY_INSTANCE,
        )
    )
    return reg, handler, prom


async def _set(
    pool: asyncpg.Pool, verb: str, name: str, now: datetime
) -> timer_pauses.ActionOutcome:
    async with transaction(pool) as conn:
        change = timer_pauses.pause if verb == "pause" else timer_pauses.resume
        return await change(conn, name, "alice", f"{verb} for the test", now)


async def test_a_pause_through_one_worker_stops_both_and_resume_restarts(
    pool: asyncpg.Pool,
) -> None:
    clock = ManualClock(T0 + timedelta(seconds=1))
    workers = [_worker(pool, clock, i) for i in range(2)]
    for reg, _, _ in workers:
        await reg.run_due()

    async def minute(k: int) -> list[str]:
        clock.set(T0 + timedelta(minutes=k))
        results = []
        for reg, _, _ in workers:
            results += [r.result for r in await reg.run_due() if r.schedule == "job"]
        return sorted(results)

    assert await minute(1) == ["deduped", "ok"]
    first = await _set(pool, "pause", "job", clock.now())
    assert (first.outcome, first.state_before, first.state_after) == (
        "changed",
        "running",
        "paused",
    )
    again = await _set(pool, "pause", "job", clock.now())
    assert again.outcome == "unchanged"  # idempotent: the first pause is kept

    assert await minute(2) == ["paused", "paused"]
    assert await minute(3) == ["paused", "paused"]
    for reg, _, prom in workers:
        [view] = [t for t in reg.list() if t["name"] == "job"]
        assert view["paused"] is True
        assert view["counts"]["paused"] == 2
        assert view["counts"]["failed"] == 0 and view["counts"]["runs"] <= 1
        assert prom.get_sample_value("reminders_timer_paused", {"schedule": "job"}) == 1
        assert prom.get_sample_value("reminders_timer_paused_runs_total", {"schedule": "job"}) == 2
        assert (
            prom.get_sample_value(
                "reminders_timer_runs_total", {"schedule": "job", "result": "failed"}
            )
            == 0
        )
        # Only the paused schedule stops: the other keeps running on every worker.
        [beat] = [t for t in reg.list() if t["name"] == "beat"]
        assert beat["paused"] is False and beat["counts"]["runs"] == 3
    # The paused slots were never claimed: they can still be run by hand or backfilled.
    slots = [
        r["slot"] for r in await pool.fetch("SELECT slot FROM ops.timer_slots WHERE name = 'job'")
    ]
    assert slots == [T0 + timedelta(minutes=1)]

    resumed = await _set(pool, "resume", "job", clock.now())
    assert (resumed.outcome, resumed.state_after) == ("changed", "running")
    assert await minute(4) == ["deduped", "ok"]
    runs = Counter(c for _, h, _ in workers for c in h.calls)
    assert sorted(runs) == [T0 + timedelta(minutes=1), T0 + timedelta(minutes=4)]
    for _, _, prom in workers:
        assert prom.get_sample_value("reminders_timer_paused", {"schedule": "job"}) == 0

    audit = await pool.fetch(
        "SELECT actor, action, listing, target, outcome, state_before, state_after, reason "
        "FROM ops.console_audit ORDER BY id"
    )
    assert [(a["action"], a["outcome"], a["state_before"], a["state_after"]) for a in audit] == [
        ("pause", "changed", "running", "paused"),
        ("pause", "unchanged", "paused", "paused"),
        ("resume", "changed", "paused", "running"),
    ]
    assert {(a["actor"], a["listing"], a["target"]) for a in audit} == {("alice", "timers", "job")}


async def test_refresh_reads_every_flag_at_once_for_timers_view(pool: asyncpg.Pool) -> None:
    clock = ManualClock(T0)
    reg, _, _ = _worker(pool, clock, 0)
    await _set(pool, "pause", "job", T0)
    await reg.refresh_pauses()
    assert {t["name"]: t["paused"] for t in reg.list()} == {"job": True, "beat": False}


class Failing:
    async def paused(self, name: str) -> bool:
        raise ConnectionError("down")

    async def paused_names(self) -> list[str]:
        raise ConnectionError("down")


async def test_a_failed_read_never_un_pauses() -> None:
    prom = CollectorRegistry()
    metrics = TimerMetrics(prom)
    spec = resolve(
        Schedule(
            name="job",
            interval=timedelta(minutes=1),
            handler=Recorder(),
            max_duration=timedelta(seconds=5),
            mode=Mode.EVERY_INSTANCE,
        ),
        environ={},
        handlers={},
        now=T0,
    )
    state = ScheduleState(spec)
    check = PauseCheck(Failing(), metrics)
    # Never read: counts as paused (fail closed).
    assert await check.paused(state) is True
    check.keep(state, True)
    assert await check.paused(state) is True  # last read: paused, stays paused
    check.keep(state, False)
    assert await check.paused(state) is False  # last read: running
    assert (
        prom.get_sample_value("reminders_timer_pause_read_failures_total", {"schedule": "job"}) == 3
    )
