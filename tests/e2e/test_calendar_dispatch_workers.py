"""Dispatch with real worker processes: several instances share the work, SIGTERM stops cleanly."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings
from tests.support.kafka import consume
from tests.support.seed import seed_reminders
from tests.support.worker import WorkerProcess, worker_env

pytestmark = pytest.mark.e2e

DUE_TOPIC = "pin.calendar.reminder-due.v1"


async def count(db: str, sql: str) -> int:
    conn = await asyncpg.connect(db)
    try:
        return int(await conn.fetchval(sql))
    finally:
        await conn.close()


async def wait_count(
    db: str, sql: str, expect: int, timeout: float, workers: list[WorkerProcess]
) -> None:
    deadline = time.monotonic() + timeout
    value = -1
    while time.monotonic() < deadline:
        value = await count(db, sql)
        if value == expect:
            return
        for w in workers:
            assert w.proc is not None and w.proc.poll() is None, f"{w.name} died:\n{w.tail()}"
        await asyncio.sleep(0.2)
    raise AssertionError(f"{sql} = {value}, expected {expect} within {timeout}s")


async def prepare(database_url: str, kafka_bootstrap: str, prefix: str, rows: int) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    # Due in the past: the workers find them on start (no precise wake-up needed).
    start = datetime.now(UTC) - timedelta(minutes=5)
    assert await seed_reminders(database_url, events=rows, offsets=[1], start=start) == rows


async def test_three_workers_send_each_of_10000_due_reminders_exactly_once(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    n = 10_000
    await prepare(database_url, kafka_bootstrap, topic_prefix, n)
    env = worker_env(
        database_url,
        kafka_bootstrap,
        topic_prefix,
        TIMER_CALENDAR_DISPATCH_INTERVAL_SECONDS="2",
        TIMER_CALENDAR_DISPATCH_MAX_DURATION_SECONDS="1",
        # A cluster-once job on a 1 s slot, to check one run per slot across the three.
        TIMER_OUTBOX_RETENTION_INTERVAL_SECONDS="1",
        TIMER_OUTBOX_RETENTION_MAX_DURATION_SECONDS="1",
    )
    workers = [WorkerProcess(env, tmp_path, f"dispatch-{i}") for i in range(3)]
    try:
        for w in workers:
            w.start()
        await asyncio.gather(*(w.wait_ready() for w in workers))
        await wait_count(
            database_url,
            "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent'",
            n,
            120,
            workers,
        )
        records = await consume(
            kafka_bootstrap, topic_prefix + DUE_TOPIC, count=n, timeout=120, settle=3.0
        )
        sent_by = []
        for w in workers:
            status, metrics = w.get("/metrics")
            assert status == 200
            line = next(
                x
                for x in metrics.splitlines()
                if x.startswith('calendar_reminder_dispatch_items_total{result="sent"}')
            )
            sent_by.append(float(line.split()[-1]))
        # Cluster-once: at least 10 slots of outbox-retention, each run by exactly one worker.
        deadline = time.monotonic() + 60
        while (
            await count(
                database_url, "SELECT count(*) FROM ops.timer_slots WHERE name = 'outbox-retention'"
            )
            < 12
        ):
            assert time.monotonic() < deadline, "outbox-retention slots are not being claimed"
            await asyncio.sleep(0.2)
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
    assert sum(sent_by) == n, sent_by
    retention = [next(t for t in ts if t["name"] == "outbox-retention")["counts"] for ts in timers]
    runs = sum(c["runs"] for c in retention)
    # Every claimed slot ran once (a run still finishing when /timers was read may be
    # missing from the counts, hence the small tolerance below the claimed total).
    assert slots - 3 <= runs <= slots, (slots, retention)
    assert sum(c["deduped"] for c in retention) >= runs, retention
    assert runs >= 10, retention


async def test_sigterm_mid_run_commits_or_rolls_back_whole_batches_and_releases_locks(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    n = 40_000
    await prepare(database_url, kafka_bootstrap, topic_prefix, n)
    env = worker_env(database_url, kafka_bootstrap, topic_prefix)
    worker = WorkerProcess(env, tmp_path, "sigterm").start()
    try:
        await worker.wait_ready()
        # Stop it while it is draining (some rows sent, not all).
        deadline = time.monotonic() + 60
        while (
            await count(
                database_url, "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent'"
            )
            == 0
        ):
            assert time.monotonic() < deadline, worker.tail()
            await asyncio.sleep(0.01)
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
    locks = await count(
        database_url,
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()",
    )
    assert locks == 0
    second = WorkerProcess(env, tmp_path, f"after-{uuid.uuid4().hex[:4]}").start()
    try:
        await second.wait_ready()
        await wait_count(database_url, "SELECT count(*) FROM ops.outbox", n, 120, [second])
    finally:
        second.stop()


def test_bad_configuration_stops_the_worker_naming_the_setting(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.support.worker import ROOT

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
