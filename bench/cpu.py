"""CPU per event of the service's processes and of PostgreSQL, printed beside the "two
processes vs one" figures (ingest, dispatch, expiry) and read by docs/capacity.md.

Three figures over one measured window, each divided by the events handled in it:

- **process CPU**: user + system time of the given processes and every live descendant (a
  worker's timer process is its child), from /proc; children already reaped count through
  their parent's cutime/cstime.
- **PostgreSQL CPU**: the same for the postmaster and its backends. The postmaster's pid
  comes from ``postmaster.pid`` in ``SHOW data_directory``, so this needs the bench to run
  on the machine of the server (the local stack). It counts every database on the server.
- **WAL bytes**: how far ``pg_current_wal_lsn()`` moved (the whole server), the figure that
  bounds one primary's write rate.
- **statement time**: ``total_exec_time + total_plan_time`` from ``pg_stat_statements`` for
  the bench's database only. This is time spent in statements (CPU and waits for locks,
  I/O and WAL flushes), not CPU alone. It needs the server to preload the module
  (stack/stack.sh and docker-compose.yml do); without it the figure is None. The bench's own
  statements (polls) are tagged with ``tagged()`` and left out.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from bench.report import Measure, measure

TICK = float(os.sysconf("SC_CLK_TCK"))

STATEMENT_TIME = """
SELECT coalesce(sum(s.total_exec_time + s.total_plan_time), 0)::float8
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = current_database() AND s.query NOT LIKE '%/* bench */%'
"""

# A bench's own statements (polls, samples) carry this comment and are left out of the time.
# pg_stat_statements drops a comment before the first keyword, so it goes after it.
TAG = "/* bench */"


def tagged(sql: str) -> str:
    """``sql`` with the bench's tag after its first word."""
    word, _, rest = sql.strip().partition(" ")
    return f"{word} {TAG} {rest}"


def _stat(pid: int) -> tuple[int, float, float] | None:
    """(parent pid, own CPU seconds, reaped children's CPU seconds); None when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; the fields after it are plain numbers.
    fields = raw[raw.rindex(")") + 2 :].split()
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return int(fields[1]), (utime + stime) / TICK, (cutime + cstime) / TICK


def _parents() -> dict[int, int]:
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                found[int(entry.name)] = stat[0]
    return found


def tree_cpu(roots: Iterable[int]) -> float:
    """CPU seconds of ``roots`` and all their live descendants, reaped children included."""
    parents = _parents()
    wanted = set(roots)
    grew = True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in wanted} - wanted
        grew = bool(more)
        wanted |= more
    total = 0.0
    for pid in wanted:
        stat = _stat(pid)
        if stat is not None:
            total += stat[1] + stat[2]
    return total


async def postmaster_pid(conn: asyncpg.Connection) -> int | None:
    """The local server's postmaster, or None when its data directory is not readable here."""
    data = await conn.fetchval(tagged("SHOW data_directory"))
    return _read_pid(Path(data, "postmaster.pid"))


def _read_pid(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(path.read_text().splitlines()[0])
    return None


async def statement_ms(conn: asyncpg.Connection) -> float | None:
    """Statement time of this database so far, or None without pg_stat_statements."""
    try:
        await conn.execute(tagged("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
        return float(await conn.fetchval(tagged(STATEMENT_TIME)))
    except (asyncpg.PostgresError, asyncpg.InterfaceError):
        return None


async def wal_position(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval(tagged("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")))


@dataclass(frozen=True)
class Sample:
    processes: float
    postgres: float | None
    statements_ms: float | None
    wal: int | None = None


@dataclass(frozen=True)
class PerEvent:
    """Microseconds per event over a window; None where a source was not available."""

    processes: float
    postgres: float | None
    statements: float | None
    wal_bytes: float | None = None

    def text(self, who: str) -> str:
        def us(v: float | None) -> str:
            return "n/a" if v is None else f"{v:,.0f} µs"

        return (
            f"CPU per event: {who} {us(self.processes)}, PostgreSQL {us(self.postgres)} "
            f"(all backends); statement time {us(self.statements)} (pg_stat_statements); "
            + ("WAL n/a" if self.wal_bytes is None else f"WAL {self.wal_bytes:,.0f} bytes")
        )


class CpuMeter:
    """Samples a window: ``await meter.sample(pids)`` at its start and end, then ``per_event``.

    ``conn`` is a connection to the bench's database (statement time is read for it)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.postmaster: int | None = None
        self._looked_up = False

    async def sample(self, pids: Iterable[int], extra_seconds: float = 0.0) -> Sample:
        """``extra_seconds``: CPU measured elsewhere (e.g. by a process about itself)."""
        if not self._looked_up:
            self.postmaster = await postmaster_pid(self.conn)
            self._looked_up = True
        statements = await statement_ms(self.conn)
        postgres = tree_cpu([self.postmaster]) if self.postmaster is not None else None
        wal = await wal_position(self.conn)
        return Sample(tree_cpu(pids) + extra_seconds, postgres, statements, wal)


def per_event(start: Sample, end: Sample, events: int) -> PerEvent:
    def us(a: float | None, b: float | None, scale: float) -> float | None:
        if a is None or b is None or events <= 0:
            return None
        return (b - a) * scale / events

    return PerEvent(
        processes=(end.processes - start.processes) * 1e6 / max(events, 1),
        postgres=us(start.postgres, end.postgres, 1e6),
        statements=us(start.statements_ms, end.statements_ms, 1e3),
        wal_bytes=us(
            None if start.wal is None else float(start.wal),
            None if end.wal is None else float(end.wal),
            1.0,
        ),
    )


def scale_measures(
    bench: str, who: str, one: PerEvent | None, two: PerEvent | None, detail: str
) -> list[Measure]:
    """Informational rows: CPU per event with two processes (project) against one (reference);
    a source that was not available gives no row."""
    if one is None or two is None:
        return []
    sources = (
        (f"{who} CPU", "µs", one.processes, two.processes, ""),
        ("PostgreSQL CPU", "µs", one.postgres, two.postgres, "; every backend of the server"),
        ("statement time", "µs", one.statements, two.statements, "; pg_stat_statements"),
        ("WAL", "bytes", one.wal_bytes, two.wal_bytes, "; pg_current_wal_lsn(), the server"),
    )
    return [
        measure(
            f"{bench}: {label} per event, two vs one",
            unit,
            b,
            a,
            higher_is_better=False,
            bench=bench,
            detail=detail + note,
        )
        for label, unit, a, b, note in sources
        if a is not None and b is not None
    ]


def own_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` itself and its reaped children (0 when it is gone); its live
    children are not counted (``tree_cpu`` counts them)."""
    stat = _stat(pid)
    return 0.0 if stat is None else stat[1] + stat[2]


def kafka_pid() -> int | None:
    """The local stack's Kafka broker (node 1, stack/stack.sh's pid file), or None when the
    bench runs against a broker elsewhere."""
    return _read_pid(Path(__file__).resolve().parent.parent / ".dev" / "kafka" / "kafka.pid")


class CpuSplit:
    """CPU seconds over one window, per source: ``sources`` maps a name to a function giving
    that source's CPU seconds so far (None: not measurable here). ``start()`` before,
    ``stop()`` after; ``stop()`` returns each source's seconds in the window."""

    def __init__(self, sources: dict[str, Callable[[], float | None]]) -> None:
        self.sources = sources
        self._start: dict[str, float | None] = {}

    def start(self) -> None:
        self._start = {name: read() for name, read in self.sources.items()}

    def stop(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for name, read in self.sources.items():
            before, after = self._start.get(name), read()
            out[name] = None if before is None or after is None else after - before
        return out


def split_text(split: dict[str, float | None]) -> str:
    """``name 1.2 s, other n/a, …``."""
    return ", ".join(
        f"{name} {'n/a' if seconds is None else f'{seconds:.1f} s'}"
        for name, seconds in split.items()
    )
