"""A quiet database before each bench: a CHECKPOINT, then a wait (polling, with a deadline)
until no autovacuum worker or VACUUM runs in a bench database, so one bench's leftovers (the
dirty buffers of its seeds and deletes, the autovacuum of its tables) do not land in the next
one's figures. ``python -m bench`` runs it before each bench and prints what it waited for;
the lateness bench runs it once more after writing its due rows.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from bench.common import DATABASE_URL

DEADLINE_S = 120.0
POLL_S = 0.2
# Every database the benches make starts with "bench" (bench/common.py's ``database``); the
# server's own databases are counted too, for the maintenance database's catalog.
BUSY = """
SELECT a.datname, count(*) AS workers
FROM pg_stat_activity a
LEFT JOIN pg_stat_progress_vacuum v ON v.pid = a.pid
WHERE (a.backend_type = 'autovacuum worker' OR v.pid IS NOT NULL)
  AND a.pid <> pg_backend_pid()
  AND (a.datname LIKE 'bench%' OR a.datname = current_database())
GROUP BY a.datname
ORDER BY a.datname
"""


@dataclass(frozen=True)
class QuietWait:
    """What one wait for a quiet database took: the CHECKPOINT, then the vacuum wait."""

    before: str
    checkpoint_s: float
    vacuum_s: float
    timed_out: bool
    busy: tuple[str, ...] = ()
    """The databases still vacuumed when the deadline passed (empty unless ``timed_out``)."""

    @property
    def seconds(self) -> float:
        return self.checkpoint_s + self.vacuum_s

    def text(self) -> str:
        end = (
            f"deadline passed, still vacuuming {', '.join(self.busy)}"
            if self.timed_out
            else "quiet"
        )
        return (
            f"  quiet database before {self.before}: CHECKPOINT {self.checkpoint_s:.1f} s, "
            f"autovacuum wait {self.vacuum_s:.1f} s ({end})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "checkpoint_s": round(self.checkpoint_s, 2),
            "vacuum_s": round(self.vacuum_s, 2),
            "timed_out": self.timed_out,
            "busy": list(self.busy),
        }


async def wait_until_idle(
    busy: Callable[[], Awaitable[Sequence[str]]],
    deadline_s: float,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> tuple[float, tuple[str, ...]]:
    """Poll ``busy`` until it answers nothing or ``deadline_s`` passed: (seconds waited, what
    was still busy at the deadline)."""
    start = clock()
    while True:
        now_busy = tuple(await busy())
        waited = clock() - start
        if not now_busy:
            return waited, ()
        if waited >= deadline_s:
            return waited, now_busy
        await pause(poll_s)


async def quiet(before: str, url: str = DATABASE_URL, deadline_s: float = DEADLINE_S) -> QuietWait:
    conn = await asyncpg.connect(url, timeout=10)
    try:
        t0 = time.monotonic()
        await conn.execute("CHECKPOINT", timeout=deadline_s)
        checkpoint_s = time.monotonic() - t0

        async def busy() -> list[str]:
            return [f"{r['datname']} ({r['workers']})" for r in await conn.fetch(BUSY)]

        waited, still = await wait_until_idle(busy, deadline_s)
    finally:
        await conn.close()
    wait = QuietWait(before, checkpoint_s, waited, bool(still), still)
    print(wait.text(), flush=True)
    return wait
