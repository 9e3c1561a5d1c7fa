"""Repository of ``ops.timer_state``: one function per statement in
``db/queries/timer_state.sql`` (the last started slot of each periodic task)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from db.connector import Executor
from db.queries import sql


async def advance(db: Executor, name: str, slot: datetime, worker: str) -> None:
    await db.execute(sql("timer_state_advance"), name, slot, worker)


async def last_slots(db: Executor, names: Sequence[str]) -> dict[str, datetime]:
    rows = await db.fetch(sql("timer_state_last_slots"), list(names))
    return {str(r["name"]): r["last_slot"] for r in rows}
