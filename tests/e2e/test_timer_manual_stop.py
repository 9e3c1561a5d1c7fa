"""``timers run`` stopped by SIGTERM hands its slot back: the next run of the same slot (by
hand or by any worker) claims it and completes it, instead of finding it claimed."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import asyncpg
import pytest

from devkit.database import scalar
from devkit.wait import eventually
from devkit.workers import ROOT, worker_env

pytestmark = pytest.mark.e2e

WAITING = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND wait_event_type = 'Lock' AND query ILIKE '%INSERT INTO profile.document_expiry_runs%'"
)


@pytest.mark.timeout(120)
async def test_a_sigtermed_manual_run_hands_its_slot_back_and_the_retry_completes_it(
    database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    env = {
        **os.environ,
        **worker_env(database_url, kafka_bootstrap, topic_prefix),
        "TIMER_DOCUMENT_EXPIRY_FANOUT": "inline",
        "DB_LOCK_TIMEOUT_SECONDS": "60",
        "PYTHONUNBUFFERED": "1",
    }
    command = [sys.executable, "-m", "streams", "timers", "run", "document-expiry"]
    holder = await asyncpg.connect(database_url)
    try:
        # The run's first statement waits for this lock: SIGTERM arrives mid-run.
        tx = holder.transaction()
        await tx.start()
        await holder.execute("LOCK TABLE profile.document_expiry_runs IN ACCESS EXCLUSIVE MODE")
        run = subprocess.Popen(  # noqa: ASYNC220 (a process the test signals, not awaited)
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )

        async def waiting() -> int:
            # Its own session: pg_stat_activity is a snapshot within a transaction.
            assert run.poll() is None, run.communicate()[0].decode(errors="replace")
            return int(await scalar(database_url, WAITING))

        await eventually(waiting, until=lambda n: n > 0, timeout=60, what="the run waits")
        run.send_signal(signal.SIGTERM)
        out, _ = await asyncio.to_thread(run.communicate, timeout=60)
        await tx.rollback()
    finally:
        await holder.close()
    text = out.decode(errors="replace")
    assert run.returncode == 1, text
    assert "cancelled" in text, text
    conn = await asyncpg.connect(database_url)
    try:
        slot = await conn.fetchrow(
            "SELECT finished_at, attempts, handbacks FROM ops.timer_slots"
            " WHERE name = 'document-expiry'"
        )
    finally:
        await conn.close()
    assert slot is not None
    assert (slot["finished_at"], slot["attempts"], slot["handbacks"]) == (None, 0, 1), dict(slot)
    again = await asyncio.to_thread(
        subprocess.run, command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "document-expiry: ok" in again.stdout
