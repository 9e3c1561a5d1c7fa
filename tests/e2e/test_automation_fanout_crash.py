"""A worker process SIGKILLed between two chunks of a setting's fan-out (fault point
``automation_fanout.after_chunk``), as another team sees it: messages from a plain aiokafka
producer, PostgreSQL read only to observe. The committed chunks stay, the position is
saved, and a worker started again plans the rest: every row once (Version 1), none left."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from db.connector import create_pool
from devkit.harness.automation_workers import topics, wait_until
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from tests.e2e.test_automation_fanout_workers import Producer, setting, source, unit

pytestmark = pytest.mark.e2e

SOURCES = 2000
CHUNK = 200


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(database_url, min_size=1, max_size=4)
    try:
        yield p
    finally:
        await p.close()


async def test_a_worker_killed_between_chunks_leaves_the_rest_to_the_next_worker(
    database_url: str,
    pool: asyncpg.Pool,
    kafka_bootstrap: str,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    await topics(kafka_bootstrap, topic_prefix)
    env = worker_env(
        database_url,
        kafka_bootstrap,
        topic_prefix,
        AUTOMATION_FANOUT_CHUNK_SOURCES=str(CHUNK),
        # The next worker finds the saved fan-out at its drainer's first slot.
        TIMER_AUTOMATION_FANOUT_INTERVAL_SECONDS="5",
        TIMER_AUTOMATION_FANOUT_MAX_DURATION_SECONDS="4",
    )
    # Killed right after the drainer's third chunk committed (the input planned the first).
    doomed = WorkerProcess(
        {**env, "STREAMS_FAULT": "automation_fanout.after_chunk:3"}, tmp_path, "a"
    )
    producer = Producer(kafka_bootstrap, topic_prefix)
    bu, guid = uuid.uuid4(), uuid.uuid4()
    expires = datetime.now(UTC).date() + timedelta(days=90)
    await producer.producer.start()
    second: WorkerProcess | None = None
    try:
        doomed.start()
        await doomed.wait_ready()
        await producer.send("pin.automation.business-units.v1", str(bu), unit(bu))
        for _ in range(SOURCES):
            g = uuid.uuid4()
            await producer.send(
                "pin.automation.source-events.v1", f"Doc:{g}", source(bu, g, expires)
            )
        await producer.producer.flush()
        await wait_until(pool, "SELECT count(*) FROM automation.sources", SOURCES, 120, [doomed])
        await producer.send("pin.automation.reminder-settings.v1", str(guid), setting(bu, guid))
        await producer.producer.flush()

        async def died() -> bool:
            return doomed.proc is not None and doomed.proc.poll() is not None

        await eventually(died, timeout=120, what="the worker killed between chunks", until=bool)
        saved = await pool.fetchrow(
            "SELECT chunks, after_guid FROM automation.fanout_progress WHERE setting_guid = $1",
            guid,
        )
        assert saved is not None and saved["chunks"] == 4
        rows = await pool.fetchval(
            "SELECT count(*) FROM automation.scheduler WHERE setting_guid = $1", guid
        )
        assert rows == 2 * 4 * CHUNK  # the four committed chunks, nothing of the fifth

        second = WorkerProcess(env, tmp_path, "b")
        second.start()
        started = time.monotonic()
        await wait_until(
            pool,
            "SELECT count(*) FROM automation.scheduler WHERE setting_guid = $1 AND version = 1",
            2 * SOURCES,
            180,
            [second],
            guid,
        )
        # Its last chunk (past the last source) ends the fan-out.
        await wait_until(pool, "SELECT count(*) FROM automation.fanout_progress", 0, 60, [second])
        print(
            f"\nthe next worker finished the fan-out {time.monotonic() - started:.1f}s after start"
        )
        assert (
            await pool.fetchval(
                "SELECT count(*) FROM automation.scheduler WHERE setting_guid = $1", guid
            )
            == 2 * SOURCES
        )
    finally:
        await producer.producer.stop()
        for w in (doomed, second):
            if w is not None and w.proc is not None and w.proc.poll() is None:
                w.stop()
        await asyncio.sleep(0)
