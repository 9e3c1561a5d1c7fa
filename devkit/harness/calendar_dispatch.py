"""Calendar dispatch against a test database: dispatchers closed after each test, sessions
that wait for or hold locks, and an event writer held before its commit."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from devkit.harness.calendar import make_runtime
from devkit.messages.factories import T0
from devkit.wait import eventually
from streams.contracts.calendar import CalendarEventChanged
from streams.input.applier import Origin, StateWriter, Written
from streams.slices.calendar.dispatch import CalendarReminderDispatcher, DispatchConfig
from streams.slices.calendar.events import CalendarWrite

START = T0 + timedelta(hours=2)
DUE = START - timedelta(minutes=60)
AFTER_DUE = DUE + timedelta(seconds=30)

_open: list[CalendarReminderDispatcher] = []


async def close_dispatchers() -> None:
    """Close the runtime of every dispatcher made since the last call."""
    while _open:
        await _open.pop().runtime.close()


def dispatcher(
    database_url: str, batch_size: int = 200, **settings: Any
) -> CalendarReminderDispatcher:
    d = CalendarReminderDispatcher(
        make_runtime(database_url, **settings), DispatchConfig(batch_size=batch_size)
    )
    _open.append(d)
    return d


# Tests that hold a session on purpose give the product's sessions room to wait for it
# (the worker default, 5 s, is for paused workers, not for a busy test machine).
PATIENT: dict[str, Any] = {"db_lock_timeout_seconds": 60}


async def waiting_on(pool: asyncpg.Pool, table: str, query_like: str = "%") -> int:
    """How many sessions of this database wait for a lock on ``table`` (pg_locks), among
    those whose current statement matches ``query_like``."""
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE NOT l.granted AND l.relation = $1::regclass "
            "AND a.datname = current_database() AND a.query ILIKE $2",
            table,
            query_like,
        )
    )


async def wait_until_waiting(pool: asyncpg.Pool, table: str, sessions: int = 1) -> None:
    """Return once ``sessions`` sessions wait for a lock on ``table``."""

    await eventually(
        lambda: waiting_on(pool, table),
        until=lambda n: n >= sessions,
        timeout=30,
        what=f"{sessions} session(s) waiting on {table}",
    )


async def blocked_by(pool: asyncpg.Pool, pid: int, what: str) -> int:
    """The pid of the session that waits for a lock held by session ``pid``."""

    async def blocked() -> int | None:
        value: int | None = await pool.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", pid
        )
        return value

    pid_waiting = await eventually(blocked, timeout=30, what=what)
    assert pid_waiting is not None
    return pid_waiting


async def row_locked(pool: asyncpg.Pool, select: str) -> bool:
    """True if some other transaction holds a lock on the row ``select`` reads
    (``FOR UPDATE NOWAIT`` is refused)."""
    async with pool.acquire() as conn, conn.transaction():
        try:
            await conn.execute(f"{select} FOR UPDATE NOWAIT")
        except asyncpg.LockNotAvailableError:
            return True
    return False


class HeldWriter:
    """The real calendar writer, held after its statements and before its commit: an
    event change in flight, holding its event row and its reminder rows."""

    def __init__(self, inner: StateWriter[CalendarEventChanged, CalendarWrite]) -> None:
        self.inner = inner
        self.inside = asyncio.Event()
        self.release = asyncio.Event()

    def key(self, message: CalendarEventChanged) -> str:
        return self.inner.key(message)

    def fingerprint(self, message: CalendarEventChanged) -> str:
        return self.inner.fingerprint(message)

    async def write(
        self,
        conn: asyncpg.Connection,
        changed: Sequence[CalendarEventChanged],
        unchanged: Sequence[CalendarEventChanged],
        now: datetime,
        origins: Mapping[str, Origin],
        fingerprints: Mapping[str, str],
    ) -> Written[CalendarWrite]:
        written = await self.inner.write(conn, changed, unchanged, now, origins, fingerprints)
        self.inside.set()
        await self.release.wait()
        return written


async def statuses(pool: asyncpg.Pool) -> dict[str, int]:
    rows = await pool.fetch(
        "SELECT status, count(*) AS n FROM calendar.event_reminders GROUP BY status"
    )
    return {r["status"]: r["n"] for r in rows}
