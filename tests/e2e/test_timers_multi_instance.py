"""Three timer workers on one PostgreSQL: cluster-once runs once per slot, every-instance on all."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import asyncpg
import pytest

from db.connector import connect
from devkit.wait import NotWithin, eventually

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 3
INTERVAL = 0.5
MIN_SLOTS = 12
DEADLINE_SECONDS = 45.0


def _log_file(path: Path) -> IO[bytes]:
    return path.open("wb")


def _tail(paths: list[Path]) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in paths)


async def _spawn(
    database_url: str, worker_id: str, log: IO[bytes], **extra: str
) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "TIMER_E2E_WORKER_ID": worker_id,
        "TIMER_E2E_CLUSTER_INTERVAL_SECONDS": str(INTERVAL),
        "TIMER_E2E_EVERY_INTERVAL_SECONDS": str(INTERVAL),
        "TIMER_E2E_EVERY_MAX_DURATION_SECONDS": str(INTERVAL * 0.8),
        "PYTHONUNBUFFERED": "1",
        **extra,
    }
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "devkit.procs.timer_worker",
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
    )


async def _progress(conn: asyncpg.Connection) -> tuple[int, dict[str, int]]:
    slots = await conn.fetchval(
        "SELECT count(DISTINCT slot) FROM e2e_timer_runs WHERE schedule = 'e2e-cluster'"
    )
    rows = await conn.fetch(
        "SELECT worker_id, count(*) AS n FROM e2e_timer_runs WHERE schedule = 'e2e-every' "
        "GROUP BY worker_id"
    )
    return int(slots), {r["worker_id"]: int(r["n"]) for r in rows}


async def test_cluster_once_runs_once_per_slot_and_every_instance_runs_on_each_worker(
    database_url: str, tmp_path: Path
) -> None:
    conn = await connect(database_url)
    try:
        await _run_workers_and_check(conn, database_url, tmp_path)
    finally:
        await conn.close()


async def _run_workers_and_check(
    conn: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    await conn.execute(
        "CREATE TABLE e2e_timer_runs (schedule text NOT NULL, slot timestamptz NOT NULL, "
        "worker_id text NOT NULL)"
    )
    worker_ids = [f"worker-{i}" for i in range(WORKERS)]
    log_paths = [tmp_path / f"{w}.log" for w in worker_ids]
    procs: list[asyncio.subprocess.Process] = []
    try:
        for worker_id, path in zip(worker_ids, log_paths, strict=True):
            log = _log_file(path)
            try:
                procs.append(await _spawn(database_url, worker_id, log))
            finally:
                log.close()

        async def progress() -> tuple[int, dict[str, int]]:
            dead = [p.returncode for p in procs if p.returncode is not None]
            assert not dead, f"a worker exited early ({dead}):\n{_tail(log_paths)}"
            return await _progress(conn)

        try:
            await eventually(
                progress,
                until=lambda p: p[0] >= MIN_SLOTS and all(p[1].get(w, 0) >= 3 for w in worker_ids),
                timeout=DEADLINE_SECONDS,
                what="cluster slots and every-instance runs (slots, every-instance)",
                interval=0.2,
            )
        except NotWithin as exc:
            raise NotWithin(f"{exc}\n{_tail(log_paths)}") from None
    finally:
        for p in procs:
            if p.returncode is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                await asyncio.wait_for(p.wait(), timeout=15)
            except TimeoutError:
                p.kill()
                await p.wait()
    assert [p.returncode for p in procs] == [0] * WORKERS, _tail(log_paths)

    per_slot = await conn.fetch(
        "SELECT slot, count(*) AS n, min(worker_id) AS worker FROM e2e_timer_runs "
        "WHERE schedule = 'e2e-cluster' GROUP BY slot ORDER BY slot"
    )
    assert len(per_slot) >= 10
    assert [r["slot"] for r in per_slot if r["n"] != 1] == []
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert all(((r["slot"] - epoch).total_seconds() / INTERVAL).is_integer() for r in per_slot)
    # Each run was done by the worker whose insert won the slot claim, and nothing else ran.
    claims = await conn.fetch(
        "SELECT slot, claimed_by, result FROM ops.timer_slots WHERE name = 'e2e-cluster' "
        "ORDER BY slot"
    )
    assert [(c["slot"], c["claimed_by"]) for c in claims] == [
        (r["slot"], r["worker"]) for r in per_slot
    ]
    assert {c["result"] for c in claims} == {"ok"}

    every = await conn.fetch(
        "SELECT worker_id, count(*) AS n, count(DISTINCT slot) AS slots FROM e2e_timer_runs "
        "WHERE schedule = 'e2e-every' GROUP BY worker_id ORDER BY worker_id"
    )
    assert [r["worker_id"] for r in every] == worker_ids
    # No worker ran a slot twice (no overlap in a process), and each ran several.
    assert all(r["n"] == r["slots"] >= 3 for r in every)
    state = await conn.fetchval("SELECT last_slot FROM ops.timer_state WHERE name = 'e2e-cluster'")
    assert state == per_slot[-1]["slot"]


async def test_a_cluster_once_slot_whose_claimant_is_killed_mid_run_is_run_by_another(
    database_url: str, tmp_path: Path
) -> None:
    conn = await connect(database_url)
    await conn.execute(
        "CREATE TABLE e2e_timer_runs (schedule text NOT NULL, slot timestamptz NOT NULL, "
        "worker_id text NOT NULL)"
    )
    worker_ids = [f"worker-{i}" for i in range(WORKERS)]
    log_paths = [tmp_path / f"{w}.log" for w in worker_ids]
    procs: dict[str, asyncio.subprocess.Process] = {}
    # e2e-lease: every 10 s, runs 3 s, max duration 4 s, lease margin 1 s; the other two
    # schedules stay at their 60 s defaults.
    extra = {"TIMER_E2E_LEASE_ENABLED": "true", "TIMER_E2E_MARGIN_SECONDS": "1"}
    try:
        for worker_id, path in zip(worker_ids, log_paths, strict=True):
            log = _log_file(path)
            try:
                procs[worker_id] = await _spawn(database_url, worker_id, log, **extra)
            finally:
                log.close()
        deadline = time.monotonic() + DEADLINE_SECONDS
        try:
            started = await eventually(
                lambda: conn.fetchrow(
                    "SELECT slot, worker_id FROM e2e_timer_runs "
                    "WHERE schedule = 'e2e-lease:start' ORDER BY slot LIMIT 1"
                ),
                until=lambda row: row is not None,
                timeout=DEADLINE_SECONDS,
                what="an e2e-lease run started",
            )
        except NotWithin as exc:
            raise NotWithin(f"{exc}\n{_tail(log_paths)}") from None
        slot, victim = started["slot"], started["worker_id"]
        procs[victim].kill()  # SIGKILL mid-run: no finish, no clean shutdown
        await procs[victim].wait()
        try:
            done = await eventually(
                lambda: conn.fetchrow(
                    "SELECT worker_id FROM e2e_timer_runs "
                    "WHERE schedule = 'e2e-lease' AND slot = $1",
                    slot,
                ),
                until=lambda row: row is not None,
                # One budget for the whole scenario, as before: what the start left of it.
                timeout=max(0.0, deadline - time.monotonic()),
                what=f"slot {slot} of killed {victim} finished",
                interval=0.1,
            )
        except NotWithin as exc:
            raise NotWithin(f"{exc}\n{_tail(log_paths)}") from None
        claim = await conn.fetchrow(
            "SELECT claimed_by, result, takeovers FROM ops.timer_slots "
            "WHERE name = 'e2e-lease' AND slot = $1",
            slot,
        )
    finally:
        for p in procs.values():
            if p.returncode is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                await asyncio.wait_for(p.wait(), timeout=15)
            except TimeoutError:
                p.kill()
                await p.wait()
        await conn.close()
    assert done["worker_id"] != victim
    assert (claim["claimed_by"], claim["result"], claim["takeovers"]) == (
        done["worker_id"],
        "ok",
        1,
    )
    survivors = [procs[w].returncode for w in worker_ids if w != victim]
    assert survivors == [0, 0], _tail(log_paths)
    assert "action=timer_slot_reclaimed" in (tmp_path / f"{done['worker_id']}.log").read_text()
