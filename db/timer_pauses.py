"""Repository of ``ops.timer_pauses``: one function per statement in
``db/queries/timer_pauses.sql`` (schedules paused cluster-wide; pause and resume audited)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from db.connector import Connection, Executor
from db.console_audit import ActionOutcome, outcome_of

__all__ = ["ActionOutcome", "get", "list_all", "pause", "resume"]
from db.queries import sql


async def get(db: Executor, schedule: str) -> dict[str, Any] | None:
    row = await db.fetchrow(sql("timer_pauses_get"), schedule)
    return dict(row) if row is not None else None


async def list_all(db: Executor) -> list[dict[str, Any]]:
    return [dict(r) for r in await db.fetch(sql("timer_pauses_list_all"))]


async def pause(
    conn: Connection, schedule: str, actor: str, reason: str, now: datetime
) -> ActionOutcome:
    return outcome_of(await conn.fetchrow(sql("timer_pauses_pause"), schedule, actor, reason, now))


async def resume(
    conn: Connection, schedule: str, actor: str, reason: str, now: datetime
) -> ActionOutcome:
    return outcome_of(await conn.fetchrow(sql("timer_pauses_resume"), schedule, actor, reason, now))
