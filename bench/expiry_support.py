"""Helpers of the document expiry bench (no test code): throwaway databases, bulk seeding of
person documents in SQL, a worker process (devkit/workers.py), and reading a counter from its
/metrics."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from datetime import date
from pathlib import Path

import asyncpg

from bench import common
from bench.cpu import kafka_pid, own_cpu, postmaster_pid, split_text, tree_cpu
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


def print_breakdown(breakdown: list[str]) -> None:
    """A run's statement time per named statement, under the run's own line."""
    for line in breakdown:
        print(f"    {line}")


async def cpu_sources(url: str, workers: list[int]) -> dict[str, Callable[[], float | None]]:
    """Where a run's CPU goes (bench/cpu.py ``CpuSplit``): PostgreSQL's server, the workers'
    own processes, their timer processes (where the relay runs), this process (the run's
    scan and fan-out) and the local Kafka broker; with no workers, PostgreSQL and Kafka."""
    conn = await asyncpg.connect(url)
    try:
        postmaster = await postmaster_pid(conn)
    finally:
        await conn.close()
    broker = kafka_pid()
    sources: dict[str, Callable[[], float | None]] = {
        "PostgreSQL": lambda: None if postmaster is None else tree_cpu([postmaster]),
    }
    if workers:
        sources["workers"] = lambda: sum(own_cpu(p) for p in workers)
        sources["their timer processes (the relay)"] = lambda: (
            tree_cpu(workers) - sum(own_cpu(p) for p in workers)
        )
        sources["the run's process"] = time.process_time
    sources["Kafka"] = lambda: None if broker is None else own_cpu(broker)
    return sources


def cpu_bound_text(split: dict[str, float | None], bare_seconds: float) -> str:
    """The run's CPU by source, and the shortest the run could take on this machine's cores
    with that CPU (every core busy throughout) against the bare statement's time."""
    total = sum(v for v in split.values() if v is not None)
    cores = os.cpu_count() or 1
    floor = total / cores
    return (
        f"CPU over the run: {split_text(split)}; {total:.1f} s in all, so at least "
        f"{floor:.1f} s on {cores} cores = {floor / bare_seconds:.2f}x the bare statement's "
        f"{bare_seconds:.1f} s"
    )
