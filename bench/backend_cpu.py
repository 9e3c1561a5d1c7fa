"""PostgreSQL's CPU per statement over a measured window: which of a run's statements the
server's CPU went to, where ``pg_stat_statements`` gives only statement time (CPU and the
waits for a core, locks and WAL flushes, which on a busy machine is mostly the former).

A sampler polls ``pg_stat_activity`` of the bench's database every ``interval`` seconds and
reads each backend's CPU from /proc (so, like bench/cpu.py, it needs the local server). The
CPU a backend used between two samples goes to the statement it was running at the first of
them; when it was idle then, to the statement it runs (or, idle again, ran last:
``pg_stat_activity.query`` keeps it) at the second. So the end of a long statement is
charged to it, not to the COMMIT that followed it before the next sample. A statement
shorter than the interval can be counted as its neighbour; the figures are samples, good to
a few percent of a statement that runs for seconds.

Each statement is named as db/queries has it: ``pg_stat_activity`` keeps a statement's first
1024 bytes, comments included, which are the start of its named text.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import asyncpg

from bench.cpu import own_cpu, tagged, wal_position
from bench.statements import name_of
from db.queries import all_queries

ACTIVITY = """
SELECT a.pid, a.state = 'active' AS active, a.query
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
  AND a.backend_type = 'client backend'
"""


@dataclass(frozen=True)
class Seen:
    """One backend at one sample: its CPU seconds so far, whether it is running a statement,
    and that statement (or, idle, the one it ran last)."""

    pid: int
    cpu: float
    statement: str
    active: bool = True


def statement_name(text: str, named: Mapping[str, str]) -> str:
    """The named statement whose text starts with ``text`` (as ``pg_stat_activity`` keeps
    it, cut at 1024 bytes), else what bench/statements.py names it."""
    head = text.strip()
    if not head:
        return "(no statement yet)"
    for name, body in named.items():
        if body.strip().startswith(head):
            return name
    return name_of(text)


def charge(previous: Mapping[int, Seen], now: Iterable[Seen]) -> dict[str, float]:
    """CPU seconds per statement between two samples: each backend seen in both, its CPU
    since ``previous`` charged to the statement it was running then, or, idle then, to its
    statement ``now``."""
    spent: dict[str, float] = defaultdict(float)
    for seen in now:
        was = previous.get(seen.pid)
        if was is not None and seen.cpu > was.cpu:
            spent[was.statement if was.active else seen.statement] += seen.cpu - was.cpu
    return dict(spent)


class BackendCpu:
    """``async with BackendCpu(url) as sampler:`` around a window; ``sampler.spent`` is the
    CPU seconds per statement name in it (``lines()`` prints the largest)."""

    def __init__(self, url: str, interval: float = 0.1) -> None:
        self.url = url
        self.interval = interval
        self.spent: dict[str, float] = defaultdict(float)
        self.wal_bytes = 0
        """How far the server's WAL moved in the window (every database's)."""
        self._wal_start = 0
        self._named = all_queries()
        self._names: dict[str, str] = {}
        self._last: dict[int, Seen] = {}
        self._task: asyncio.Task[None] | None = None
        self._conn: asyncpg.Connection | None = None

    async def __aenter__(self) -> BackendCpu:
        self._conn = await asyncpg.connect(self.url)
        self._wal_start = await wal_position(self._conn)
        await self._sample()
        self._task = asyncio.create_task(self._poll())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None and self._conn is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        try:
            await self._sample()
            self.wal_bytes = await wal_position(self._conn) - self._wal_start
        finally:
            await self._conn.close()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self._sample()

    def _name(self, text: str | None) -> str:
        key = text or ""
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = statement_name(key, self._named)
        return name

    async def _sample(self) -> None:
        assert self._conn is not None
        now: list[Seen] = []
        for row in await self._conn.fetch(tagged(ACTIVITY)):
            seconds = own_cpu(int(row["pid"]))
            if seconds:
                name = self._name(row["query"])
                now.append(Seen(int(row["pid"]), seconds, name, bool(row["active"])))
        for name, seconds in charge(self._last, now).items():
            self.spent[name] += seconds
        self._last = {s.pid: s for s in now}

    def lines(self, top: int = 8) -> list[str]:
        """The ``top`` statements by CPU, one line each, under a total."""
        total = sum(self.spent.values())
        out = [
            f"PostgreSQL CPU of its backends by statement (sampled every "
            f"{self.interval:.1f} s): {total:.1f} s"
        ]
        for name, seconds in sorted(self.spent.items(), key=lambda kv: -kv[1])[:top]:
            out.append(f"  {seconds:7.2f} s  {name}")
        return out
