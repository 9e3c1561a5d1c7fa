"""Helpers of the document expiry bench (no test code): throwaway databases, bulk seeding of
person documents in SQL, a worker process (devkit/workers.py), and reading a counter from its
/metrics."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from datetime import date
from pathlib import Path

import asyncpg

from bench import common
from devkit.workers import WorkerProcess

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


@contextlib.contextmanager
def worker(env: dict[str, str], data_dir: Path, name: str) -> Iterator[WorkerProcess]:
    """A started ``python -m streams worker`` (data under ``data_dir/name``, log
    ``data_dir/name.log``), stopped afterwards."""
    proc = WorkerProcess(env, data_dir, name).start()
    try:
        yield proc
    finally:
        proc.stop(timeout=60)


async def wait_ready(worker: WorkerProcess) -> None:
    await worker.wait_ready(timeout=120.0)


async def metric(worker: WorkerProcess, name: str) -> float:
    """The value of an unlabelled sample of the worker's /metrics."""
    _, text = await asyncio.to_thread(worker.get, "/metrics")
    for line in str(text).splitlines():
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
