"""Automation scheduler with real worker processes, Kafka and PostgreSQL: several workers
complete each due row once, and a worker killed after its claim loses nothing."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from db.connector import create_pool
from devkit.harness.automation import seed
from devkit.harness.automation_workers import topics, wait_until
from devkit.kafka import read_to_end
from devkit.workers import WorkerProcess, worker_env

pytestmark = pytest.mark.e2e

TOPIC = "pin.automation.dispatch-requested.v1"


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(database_url, min_size=1, max_size=4)
    try:
        yield p
    finally:
        await p.close()


def completed_by(worker: WorkerProcess) -> float:
    status, text = worker.get("/metrics")
    assert status == 200
    for line in text.splitlines():
        if line.startswith('automation_scheduler_outcomes_total{outcome="completed"'):
            return float(line.split()[-1])
    return 0.0


async def test_three_workers_put_each_of_10000_due_keys_on_the_topic_once(
    database_url: str,
    pool: asyncpg.Pool,
    kafka_bootstrap: str,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    n = 10_000
    await topics(kafka_bootstrap, topic_prefix)
    env = worker_env(
        database_url,
        kafka_bootstrap,
        topic_prefix,
        TIMER_AUTOMATION_SCHEDULER_INTERVAL_SECONDS="2",
        TIMER_AUTOMATION_SCHEDULER_MAX_DURATION_SECONDS="1",
    )
    workers = [WorkerProcess(env, tmp_path, f"automation-{i}") for i in range(3)]
    try:
        for w in workers:
            w.start()
        await asyncio.gather(*(w.wait_ready() for w in workers))
        # The due rows appear once all three run, so that they share them (a worker that
        # starts first would otherwise drain 10,000 rows before the others are up).
        candidates = await seed(pool, n, datetime.now(UTC) - timedelta(minutes=5))
        # One more row on support hold, for the support views.
        [held] = await seed(pool, 1, datetime.now(UTC) + timedelta(days=1))
        await pool.execute(
            "UPDATE automation.scheduler SET is_on_support_hold = true, retry_count = 4, "
            "status_id = 'Failed', failure_reason_code = 'HandlerError', last_error = 'RuntimeError' "
            "WHERE scheduler_key = $1",
            held.key,
        )
        await wait_until(
            pool,
            "SELECT count(*) FROM automation.scheduler WHERE status_id = 'Completed'",
            n,
            180,
            workers,
        )
        await wait_until(
            pool, "SELECT count(*) FROM ops.outbox WHERE published_at IS NULL", 0, 120, workers
        )
        by_worker = [completed_by(w) for w in workers]
        _, hold_view = workers[0].get("/automation/hold?format=json")
        _, status = workers[1].get("/status?format=json")
        _, page = workers[2].get("/automation/hold")
    finally:
        for w in workers:
            w.stop()
    records = await read_to_end(kafka_bootstrap, topic_prefix + TOPIC)
    keys = [r.key.decode() for r in records if r.key is not None]
    # Each SchedulerKey on the topic exactly once, keyed by itself, from its own outbox row.
    assert len(keys) == len(set(keys)) == n, (len(keys), len(set(keys)))
    assert set(keys) == {c.key for c in candidates}
    assert all(json.loads(r.value)["SchedulerKey"] == r.key.decode() for r in records)
    assert await pool.fetchval("SELECT count(*) FROM ops.outbox") == n
    assert sum(by_worker) == n, by_worker
    assert sum(1 for x in by_worker if x > 0) >= 2, by_worker  # the work was shared
    [row] = hold_view["on_hold"]
    assert (row["scheduler_key"], row["hold_reason"], row["attempts"], row["last_error"]) == (
        held.key,
        "HandlerError",
        4,
        "RuntimeError",
    )
    section = status["automation"]
    assert (section["on_hold"], section["due_backlog"], section["fenced"]) == (1, 0, 0)
    assert section["held"][0]["scheduler_key"] == held.key
    assert "Automation rows on support hold (1)" in page and "HandlerError" in page


async def test_a_worker_killed_after_its_claim_loses_nothing_and_duplicates_nothing(
    database_url: str,
    pool: asyncpg.Pool,
    kafka_bootstrap: str,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    n = 600
    await topics(kafka_bootstrap, topic_prefix)
    env = worker_env(
        database_url,
        kafka_bootstrap,
        topic_prefix,
        AUTOMATION_BATCH_SIZE="100",
        AUTOMATION_LEASE_SECONDS="12",
        AUTOMATION_BACKOFF_SECONDS="1,1,1",
        AUTOMATION_INTERRUPTION_DELAY_SECONDS="1",
        # Wake-ups (start, next due, retry due) drive the runner; the interval is a safety net.
        TIMER_AUTOMATION_SCHEDULER_INTERVAL_SECONDS="11",
        TIMER_AUTOMATION_SCHEDULER_MAX_DURATION_SECONDS="10",
        TIMER_AUTOMATION_STALE_CLEANUP_INTERVAL_SECONDS="1",
        TIMER_AUTOMATION_STALE_CLEANUP_MAX_DURATION_SECONDS="0.5",
        # The blocked statement below must wait for the lock, not time out.
        DB_LOCK_TIMEOUT_SECONDS="60",
    )
    victim = WorkerProcess(env, tmp_path, "victim")
    survivor = WorkerProcess(env, tmp_path, "survivor")
    holder = await asyncpg.connect(database_url)
    try:
        # Hold the outbox: a claim commits, its completion then waits on the outbox insert.
        tx = holder.transaction()
        await tx.start()
        await holder.execute("LOCK TABLE ops.outbox IN EXCLUSIVE MODE")
        await seed(pool, n, datetime.now(UTC) - timedelta(minutes=1))
        for w in (victim, survivor):
            w.start()
        await asyncio.gather(victim.wait_ready(), survivor.wait_ready())
        assert victim.proc is not None
        app_name = f"{env['APP_ID']}:{victim.proc.pid}"
        # The victim claimed a batch (committed) and waits inside its completion.
        await wait_until(
            pool,
            "SELECT count(*) > 0 FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
            "WHERE a.application_name = $1 AND NOT l.granted "
            "AND l.relation = 'ops.outbox'::regclass AND a.query LIKE '%INSERT INTO ops.outbox%'",
            True,
            60,
            [victim, survivor],
            app_name,
        )
        in_flight = await pool.fetchval(
            "SELECT count(*) FROM automation.scheduler WHERE status_id = 'Processing'"
        )
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(timeout=10)
        await tx.rollback()
        await wait_until(
            pool,
            "SELECT count(*) FROM automation.scheduler WHERE status_id = 'Completed'",
            n,
            120,
            [survivor],
        )
        await wait_until(
            pool, "SELECT count(*) FROM ops.outbox WHERE published_at IS NULL", 0, 60, [survivor]
        )
    finally:
        await holder.close()
        victim.kill()
        survivor.stop()
    assert in_flight >= 100, in_flight  # at least the victim's claimed batch
    rescued = await pool.fetchval(
        "SELECT count(*) FROM automation.scheduler "
        "WHERE interrupted_count = 1 AND retry_count = 0 AND failure_reason_code IS NULL"
    )
    # The victim's batch came back after its lease as interrupted, not as a failed attempt
    # (and completed on the survivor).
    assert rescued >= 100, rescued
    records = await read_to_end(kafka_bootstrap, topic_prefix + TOPIC)
    keys = [r.key for r in records]
    assert len(keys) == len(set(keys)) == n
    assert await pool.fetchval("SELECT count(*) FROM ops.outbox") == n
