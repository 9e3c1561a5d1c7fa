"""Repository of the timer registry: slot claims, last started slots, pruning (ops.timer_*)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from db.connector import translating
from db.queries import sql


class TimerRepository:
    """One method per statement of db/queries/timers.sql; implements streams.timers.TimerStore,
    whose method names it keeps (the registry's port speaks of claiming and finishing slots).
    Statements run on the pool one at a time, each its own unit of work, so driver errors are
    translated here, where each opens."""

    def __init__(self, db: asyncpg.Pool | asyncpg.Connection) -> None:
        self._db = db

    async def claim_slot(
        self,
        name: str,
        slot: datetime,
        claimed_by: str,
        run_id: str,
        lease_expires_at: datetime | None = None,
    ) -> bool:
        async with translating():
            won = await self._db.fetchval(
                sql("timer_slot_claim"), name, slot, claimed_by, run_id, lease_expires_at
            )
        return won is not None

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
        async with translating():
            won = await self._db.fetchval(
                sql("timer_slot_reclaim"),
                name,
                slot,
                claimed_by,
                run_id,
                lease_expires_at,
                now,
                released,
            )
        return won is not None

    async def unfinished_slots(
        self, name: str, since: datetime, limit: int
    ) -> list[tuple[datetime, datetime]]:
        async with translating():
            rows = await self._db.fetch(sql("timer_slot_unfinished"), name, since, limit)
        return [(r["slot"], r["lease_expires_at"]) for r in rows]

    async def give_up_released(self, name: str, before: datetime) -> list[datetime]:
        async with translating():
            rows = await self._db.fetch(sql("timer_slot_give_up_released"), name, before)
        return [r["slot"] for r in rows]

    async def slot_attempts(self, name: str, slot: datetime, run_id: str) -> int | None:
        async with translating():
            attempts = await self._db.fetchval(sql("timer_slot_attempts"), name, slot, run_id)
        return None if attempts is None else int(attempts)

    async def finish_slot(
        self,
        name: str,
        slot: datetime,
        run_id: str,
        result: str,
        duration_seconds: float,
        error: str | None = None,
    ) -> bool:
        async with translating():
            owned = await self._db.fetchval(
                sql("timer_slot_finish"), name, slot, run_id, result, duration_seconds, error
            )
        return owned is not None

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
        async with translating():
            owned = await self._db.fetchval(
                sql("timer_slot_release"),
                name,
                slot,
                run_id,
                result,
                duration_seconds,
                next_attempt_at,
                counted,
                error,
            )
        return owned is not None

    async def prune_slots(self, before: datetime, limit: int) -> int:
        async with translating():
            deleted = await self._db.fetchval(sql("timer_slot_prune"), before, limit)
        return int(deleted)

    async def advance_state(self, name: str, slot: datetime, worker: str) -> None:
        async with translating():
            await self._db.execute(sql("timer_state_advance"), name, slot, worker)

    async def last_slots(self, names: Sequence[str]) -> dict[str, datetime]:
        async with translating():
            rows = await self._db.fetch(sql("timer_state_list"), list(names))
        return {str(r["name"]): r["last_slot"] for r in rows}
