"""The timer registry's store: slot claims, last started slots, pruning and the cluster-wide
pause flags, on the repositories ``db/timer_slots.py``, ``db/timer_state.py`` and
``db/timer_pauses.py``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from db import timer_pauses, timer_slots, timer_state
from db.connector import Executor, translating


class TimerRepository:
    """Implements streams.timers.TimerStore, whose method names it keeps (the registry's port
    speaks of claiming and finishing slots): one repository function per method. Statements
    run on the pool one at a time, each its own unit of work, so driver errors are translated
    here, where each opens."""

    def __init__(
        self,
        db: Executor | None = None,
        *,
        open_db: Callable[[], Awaitable[Executor]] | None = None,
    ) -> None:
        """On ``db``, or on what ``open_db()`` returns for each statement (the worker's
        lazily created pool: it needs the running loop)."""
        if (db is None) == (open_db is None):
            raise TypeError("TimerRepository takes db or open_db")
        self._db = db
        self._open_db = open_db

    async def _executor(self) -> Executor:
        if self._db is not None:
            return self._db
        assert self._open_db is not None
        return await self._open_db()

    async def claim_slot(
        self,
        name: str,
        slot: datetime,
        claimed_by: str,
        run_id: str,
        lease_expires_at: datetime | None = None,
    ) -> bool:
        db = await self._executor()
        async with translating():
            return await timer_slots.claim(db, name, slot, claimed_by, run_id, lease_expires_at)

    async def reclaim_slot(
        self,
        name: str,
        slot: datetime,
        claimed_by: str,
        run_id: str,
        lease_expires_at: datetime,
        now: datetime,
        *,
        released: bool = False,
    ) -> bool:
        db = await self._executor()
        async with translating():
            return await timer_slots.reclaim(
                db, name, slot, claimed_by, run_id, lease_expires_at, now, released
            )

    async def unfinished_slots(
        self, name: str, since: datetime, limit: int
    ) -> list[tuple[datetime, datetime]]:
        db = await self._executor()
        async with translating():
            return await timer_slots.unfinished(db, name, since, limit)

    async def give_up_released(self, name: str, before: datetime) -> list[datetime]:
        db = await self._executor()
        async with translating():
            return await timer_slots.give_up_released(db, name, before)

    async def slot_attempts(self, name: str, slot: datetime, run_id: str) -> int | None:
        db = await self._executor()
        async with translating():
            return await timer_slots.attempts(db, name, slot, run_id)

    async def finish_slot(
        self,
        name: str,
        slot: datetime,
        run_id: str,
        result: str,
        duration_seconds: float,
        error: str | None = None,
    ) -> bool:
        db = await self._executor()
        async with translating():
            return await timer_slots.finish(db, name, slot, run_id, result, duration_seconds, error)

    async def release_slot(
        self,
        name: str,
        slot: datetime,
        run_id: str,
        result: str,
        duration_seconds: float,
        next_attempt_at: datetime,
        *,
        counted: bool,
        error: str | None,
    ) -> bool:
        db = await self._executor()
        async with translating():
            return await timer_slots.release(
                db,
                name,
                slot,
                run_id,
                result,
                duration_seconds,
                next_attempt_at,
                counted,
                error,
            )

    async def prune_slots(self, before: datetime, limit: int) -> int:
        db = await self._executor()
        async with translating():
            return await timer_slots.prune(db, before, limit)

    async def advance_state(self, name: str, slot: datetime, worker: str) -> None:
        db = await self._executor()
        async with translating():
            await timer_state.advance(db, name, slot, worker)

    async def last_slots(self, names: Sequence[str]) -> dict[str, datetime]:
        db = await self._executor()
        async with translating():
            return await timer_state.last_slots(db, names)

    async def paused(self, name: str) -> bool:
        db = await self._executor()
        async with translating():
            return await timer_pauses.get(db, name) is not None

    async def paused_names(self) -> list[str]:
        db = await self._executor()
        async with translating():
            return [str(r["schedule"]) for r in await timer_pauses.list_all(db)]
