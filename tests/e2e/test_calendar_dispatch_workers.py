"""Dispatch with real worker processes: several instances share the work, SIGTERM stops cleanly."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from devkit.database import scalar
from devkit.kafka import read_to_end
from devkit.observe.metrics import sample
from devkit.seed import seed_reminders
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings
from streams.slices.calendar.dispatch import DispatchConfig

pytestmark = pytest.mark.e2e

DUE_TOPIC = "pin.calendar.reminder-due.v1"
BATCH = DispatchConfig().batch_size  # what a worker's dispatcher claims per batch


async def count(db: str, sql: str) -> int:
    return int(await scalar(db, sql))


async def wait_count(
    db: str, sql: str, expect: int, timeout: float, workers: list[WorkerProcess]
) -> None:
    async def value() -> int:
        for w in workers:
            assert w.proc is not None and w.proc.poll() is None, f"{w.name} died:\n{w.tail()}"
        return await count(db, sql)

    await eventually(
        value, until=lambda v: v == expect, timeout=timeout, what=f"{sql} = {expect}", interval=0.2
    )


async def prepare(database_url: str, kafka_bootstrap: str, prefix: str, rows: int) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    await seed_due(database_url, rows)


async def seed_due(database_url: str, rows: int) -> None:
    # Due in the past: the workers find them on start (no precise wake-up needed).
    start = datetime.now(UTC) - timedelta(minutes=5)
    assert await seed_reminders(database_url, events=rows, offsets=[1], start=start) == rows


def metrics_of(worker: WorkerProcess) -> str:
    status, text = worker.get("/metrics")
    assert status == 200, (worker.name, status)
    return str(text)


WAITING_INSERTS = (
    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE NOT l.granted AND l.relation = 'ops.outbox'::regclass "
    "AND a.datname = current_database() AND a.query ILIKE '%INSERT INTO ops.outbox%'"
)


@pytest.mark.timeout(720)  # waits: 120 + 90 + 120 + 60 + 60 + 60 s, and three stops of 30 s
async def test_three_workers_send_each_of_10000_due_reminders_exactly_once(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    """Three workers share 10000 due reminders: each is sent once, every worker sends, and
    SKIP LOCKED passes rows over.

    Made deterministic without sleeps: the outbox table is share-locked before the workers
    start, so each worker's first dispatch batch claims its rows and then waits at its
    outbox INSERT, holding them. With 500 due rows for three batches of 200, every worker
    holds a batch and the last claim comes back 100 short of a visible 200: the
    skip-locked counter (which counts only a claim that comes back short while locked due
    rows exist) moves by exactly 100 in that round. The other 9500 rows arrive while the
    three are held, then the lock is released and the three drain them together."""
    n, first_round = 10_000, 500
    await prepare(database_url, kafka_bootstrap, topic_prefix, first_round)
    env = worker_env(
        database_url,
        kafka_bootstrap,
        topic_prefix,
        # A run held at the barrier must outlive it (an every-instance schedule's max
        # duration stays below its interval); wake-ups, not the interval, drive the drain.
        TIMER_CALENDAR_DISPATCH_INTERVAL_SECONDS="120",
        TIMER_CALENDAR_DISPATCH_MAX_DURATION_SECONDS="100",
        DB_LOCK_TIMEOUT_SECONDS="120",
        # A cluster-once job on a 1 s slot, to check one run per slot across the three.
        TIMER_OUTBOX_RETENTION_INTERVAL_SECONDS="1",
        TIMER_OUTBOX_RETENTION_MAX_DURATION_SECONDS="1",
        RETENTION_BUDGET_SECONDS="0.5",  # a run's budget ends before its max duration
    )
    workers = [WorkerProcess(env, tmp_path, f"dispatch-{i}") for i in range(3)]
    try:
        blocker = await asyncpg.connect(database_url)
        try:
            barrier = blocker.transaction()
            await barrier.start()
            await blocker.execute("LOCK TABLE ops.outbox IN SHARE MODE")
            for w in workers:
                w.start()
            await wait_count(database_url, WAITING_INSERTS, 3, 120, workers)
            assert (
                await count(
                    database_url,
                    "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent'",
                )
                == 0
            ), "nothing commits while the outbox is held"
            await seed_due(database_url, n - first_round)
            await barrier.commit()
        finally:
            await blocker.close()
        await asyncio.gather(*(w.wait_ready() for w in workers))
        await wait_count(
            database_url,
            "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent'",
            n,
            120,
            workers,
        )
        # Every row is Sent and every outbox row published: the topic is complete.
        await wait_count(
            database_url,
            "SELECT count(*) FROM ops.outbox WHERE published_at IS NULL",
            0,
            60,
            workers,
        )
        records = await read_to_end(kafka_bootstrap, topic_prefix + DUE_TOPIC)
        texts = [metrics_of(w) for w in workers]
        sent_by = [
            sample(t, "calendar_reminder_dispatch_items_total", result="sent") for t in texts
        ]
        locked_by = [sample(t, "calendar_reminder_dispatch_skip_locked_total") for t in texts]
        # Cluster-once: at least 12 slots of outbox-retention, each run by exactly one worker.
        await wait_count(
            database_url,
            "SELECT least(count(*), 12) FROM ops.timer_slots WHERE name = 'outbox-retention'",
            12,
            60,
            workers,
        )
        timers = [w.get("/timers")[1] for w in workers]
        slots = await count(
            database_url, "SELECT count(*) FROM ops.timer_slots WHERE name = 'outbox-retention'"
        )
    finally:
        for w in workers:
            w.stop()
    ids = [json.loads(r.value)["ReminderId"] for r in records]
    outbox_ids = [dict(r.headers)["outbox-id"] for r in records]
    # Exactly one event per ReminderId on the topic, each from its own outbox row.
    assert len(ids) == len(set(ids)) == n
    assert len(set(outbox_ids)) == n
    assert await count(database_url, "SELECT count(*) FROM ops.outbox") == n
    assert sum(x or 0 for x in sent_by) == n, sent_by
    assert all(x is not None and x > 0 for x in sent_by), f"a worker sent nothing: {sent_by}"
    assert sum(x or 0 for x in locked_by) >= 3 * BATCH - first_round, locked_by
    retention = [next(t for t in ts if t["name"] == "outbox-retention")["counts"] for ts in timers]
    runs = sum(c["runs"] for c in retention)
    # Every claimed slot ran once (a run still finishing when /timers was read may be
    # missing from the counts, hence the small tolerance below the claimed total).
    assert slots - 3 <= runs <= slots, (slots, retention)
    # The other workers saw slots owned elsewhere. Not one dedupe per run per worker: a
    # worker busy with its own run (a retention DELETE waits out its 1 s limit while the
    # outbox is share-locked above) coalesces the slots that pass meanwhile.
    assert sum(c["deduped"] for c in retention) > 0, retention
    assert runs >= 10, retention


@pytest.mark.timeout(600)  # start 90 + sending 60 + stop 60 + restart 90 + drain 120 + stop 30
async def test_sigterm_mid_run_commits_or_rolls_back_whole_batches_and_releases_locks(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    # Enough rows that the run (started by the worker as it comes up, before the test sees it
    # ready) cannot send them all before the SIGTERM: 40,000 took 3.4 s on a quiet machine.
    n = 160_000
    await prepare(database_url, kafka_bootstrap, topic_prefix, n)
    env = worker_env(database_url, kafka_bootstrap, topic_prefix)
    worker = WorkerProcess(env, tmp_path, "sigterm").start()
    try:
        await worker.wait_ready()

        # Stop it while it is draining (some rows sent, not all).
        async def sending() -> int:
            assert worker.proc is not None and worker.proc.poll() is None, worker.tail()
            return await count(
                database_url, "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent'"
            )

        await eventually(sending, timeout=60, what="the worker sending", interval=0.01)
        rc = worker.stop(signal.SIGTERM, timeout=60)
    finally:
        worker.kill()
    assert rc == 0, worker.tail()
    sent = await count(
        database_url, "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent'"
    )
    pending = await count(
        database_url, "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Pending'"
    )
    outbox = await count(database_url, "SELECT count(*) FROM ops.outbox")
    assert pending > 0, "the worker finished before the SIGTERM; nothing was interrupted"
    # Whole batches only: every Sent row has its outbox row, nothing half-done.
    assert sent + pending == n and sent == outbox and sent % 200 == 0, (sent, pending, outbox)
    # No session of the stopped worker holds a lock; a new claim gets every remaining row.
    # (A closed session's backend releases its locks as it exits, a moment after the client
    # is gone: allowed a few seconds on a loaded machine, not a transaction's worth.)
    conn = await asyncpg.connect(database_url)
    try:
        locks = await eventually(
            lambda: conn.fetch(
                "SELECT l.locktype, l.mode, l.relation::regclass::text AS relation, a.pid, "
                "a.application_name, a.state, left(a.query, 80) AS query "
                "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()"
            ),
            until=lambda rows: not rows,
            timeout=5,
            what="no session of the stopped worker holding a lock",
            interval=0.1,
        )
    finally:
        await conn.close()
    assert not locks
    second = WorkerProcess(env, tmp_path, f"after-{uuid.uuid4().hex[:4]}").start()
    try:
        await second.wait_ready()
        await wait_count(database_url, "SELECT count(*) FROM ops.outbox", n, 120, [second])
    finally:
        second.stop()


def test_bad_configuration_stops_the_worker_naming_the_setting(tmp_path: Path) -> None:
    import subprocess
    import sys

    from devkit.workers import ROOT

    cases: list[tuple[dict[str, Any], str]] = [
        ({"OUTBOX_BATCH_SIZE": "0"}, "OUTBOX_BATCH_SIZE"),
        (
            {"TIMER_CALENDAR_DISPATCH_INTERVAL_SECONDS": "-5"},
            "TIMER_CALENDAR_DISPATCH_INTERVAL_SECONDS",
        ),
        ({"TIMER_OUTBOX_RETENTION_CRON": "not a cron"}, "TIMER_OUTBOX_RETENTION_CRON"),
    ]
    for env, setting in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "streams", "worker"],
            cwd=ROOT,
            env={**__import__("os").environ, **env, "WORKER_DATA_DIR": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, (setting, proc.returncode, proc.stderr[-2000:])
        assert setting in proc.stderr, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
