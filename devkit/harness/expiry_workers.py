"""Document expiry with worker processes: the expected reminders of a sequence of daily runs,
``python -m streams timers`` as a subprocess, and waits that fail at once when a worker died."""

from __future__ import annotations

import asyncio
import os
import sys
from collections import defaultdict
from datetime import date
from typing import Any

import asyncpg

from devkit.wait import eventually
from devkit.workers import ROOT, WorkerProcess
from streams.domain.profile import crossed, days_left, scan_window

REMINDERS = "pin.profile.document-expiry-reminders.v1"
THRESHOLDS = (30, 7, 1, 0)


async def poll(db: str, query: str, ok: Any, timeout: float, workers: list[WorkerProcess]) -> Any:
    """Poll ``query`` until ``ok(value)``; fails on the deadline or when a worker died."""
    conn = await asyncpg.connect(db)
    try:

        async def probe() -> Any:
            value = await conn.fetchval(query)
            if not ok(value):
                for w in workers:
                    assert w.proc is not None and w.proc.poll() is None, (
                        f"{w.name} died:\n{w.tail()}"
                    )
            return value

        return await eventually(probe, timeout=timeout, what=query, until=ok, interval=0.2)
    finally:
        await conn.close()


async def published(db: str, workers: list[WorkerProcess]) -> None:
    await poll(
        db,
        "SELECT count(*) FROM ops.outbox WHERE published_at IS NULL",
        lambda v: v == 0,
        60,
        workers,
    )


def expected_reminders(
    docs: list[dict[str, Any]], days: list[date]
) -> dict[date, set[tuple[str, int]]]:
    """The seed's rules over a sequence of daily runs, from an empty ledger."""
    marked: dict[str, set[int]] = defaultdict(set)
    out: dict[date, set[tuple[str, int]]] = {}
    for day in days:
        window = scan_window(day, THRESHOLDS)
        out[day] = set()
        for d in docs:
            expires = date.fromisoformat(d["ExpiresAt"])
            if expires not in window:
                continue
            todo = crossed(days_left(expires, day), THRESHOLDS) - marked[d["DocumentId"]]
            if todo:
                out[day].add((d["DocumentId"], min(todo)))
                marked[d["DocumentId"]] |= todo
    return out


async def cli(env: dict[str, str], *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "streams",
        "timers",
        *args,
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode() + err.decode()[-2000:]
