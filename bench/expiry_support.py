"""Helpers of the document expiry bench (no test code): throwaway databases, bulk seeding of
person documents in SQL, a worker process, and reading a counter from its /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from datetime import date
from pathlib import Path

import asyncpg

from bench import common

ROOT = Path(__file__).resolve().parent.parent
KAFKA_BOOTSTRAP = common.KAFKA_BOOTSTRAP


def database(
    template: str | None = None, prefix: str = "bench_exp"
) -> AbstractAsyncContextManager[str]:
    """A fresh database (migrated, or a copy of ``template``), dropped afterwards."""
    return common.database(template, prefix)


async def seed_documents(url: str, *, owners: int, per_owner: int, today: date) -> int:
    """``owners`` x ``per_owner`` Active documents, ExpiresAt spread over today-1 .. today+30
    (every one in the window, DaysLeft -1..30), in bulk SQL; returns the number inserted."""
    conn = await asyncpg.connect(url)
    try:
        n = await conn.fetchval(
            """
            WITH o AS (SELECT gen_random_uuid() AS owner FROM generate_series(1, $1::int)),
            ins AS (
                INSERT INTO profile.person_documents (document_id, owner_user_id, person_id, type,
                    number_mask, expires_at, status, is_deleted, version, occurred_at)
                SELECT gen_random_uuid(), o.owner, gen_random_uuid(), 'InternationalPassport',
                       '45** ****12', $3::date - 1 + ((random() * 31)::int), 'Active', false, 1,
                       now()
                FROM o, generate_series(1, $2::int)
                RETURNING 1
            ) SELECT count(*) FROM ins
            """,
            owners,
            per_owner,
            today,
        )
        await conn.execute("VACUUM ANALYZE profile.person_documents")
        return int(n)
    finally:
        await conn.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def worker(env: dict[str, str], log: Path) -> Iterator[int]:
    """A ``python -m streams worker`` process; yields its web port, stops it afterwards."""
    with worker_process(env, log) as (port, _):
        yield port


@contextlib.contextmanager
def worker_process(env: dict[str, str], log: Path) -> Iterator[tuple[int, int]]:
    """As ``worker``; yields its web port and its pid."""
    port = free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streams", "worker"],
            cwd=ROOT,
            env={**os.environ, **env, "WEB_PORT": str(port), "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield port, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


async def wait_ready(port: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            body = await asyncio.to_thread(_get, port, "/health")
            if '"ready"' in body and '"assigned_partitions":0' not in body:
                return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"worker on port {port} not ready in {timeout}s")


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return str(r.read().decode())


async def metric(port: int, name: str) -> float:
    """The value of an unlabelled sample of the worker's /metrics."""
    text = await asyncio.to_thread(_get, port, "/metrics")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise KeyError(name)


def peak_rss_mb(pid: int) -> float:
    """Peak resident memory (VmHWM) of a live process, in MB (0 when it is gone)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (a worker's timer process)."""
    with contextlib.suppress(OSError):
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []
