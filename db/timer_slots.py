"""Repository of ``ops.timer_slots``: one function per statement in
``db/queries/timer_slots.sql`` (cluster-once claims of periodic-task slots)."""

from __future__ import annotations

from datetime import datetime

from db.connector import Executor
from db.queries import sql


async def claim(
    db: Executor,
    name: str,
    slot: datetime,
    claimed_by: str,
    run_id: str,
    lease_expires_at: datetime | None,
) -> bool:
    won = await db.fetchval(
        sql("timer_slots_claim"), name, slot, claimed_by, run_id, lease_expires_at
    )
    return won is not None


async def reclaim(
    db: Executor,
    name: str,
    slot: datetime,
    claimed_by: str,
    run_id: str,
    lease_expires_at: datetime,
    now: datetime,
    released: bool,
) -> bool:
    won = await db.fetchval(
        sql("timer_slots_reclaim"), name, slot, claimed_by, run_id, lease_expires_at, now, released
    )
    return won is not None


async def unfinished(
    db: Executor, name: str, since: datetime, limit: int
) -> list[tuple[datetime, datetime]]:
    rows = await db.fetch(sql("timer_slots_unfinished"), name, since, limit)
    return [(r["slot"], r["lease_expires_at"]) for r in rows]


async def give_up_released(db: Executor, name: str, before: datetime) -> list[datetime]:
    rows = await db.fetch(sql("timer_slots_give_up_released"), name, before)
    return [r["slot"] for r in rows]


async def attempts(db: Executor, name: str, slot: datetime, run_id: str) -> int | None:
    n = await db.fetchval(sql("timer_slots_attempts"), name, slot, run_id)
    return None if n is None else int(n)


async def finish(
    db: Executor,
    name: str,
    slot: datetime,
    run_id: str,
    result: str,
    duration_seconds: float,
    error: str | None,
) -> bool:
    owned = await db.fetchval(
        sql("timer_slots_finish"), name, slot, run_id, result, duration_seconds, error
    )
    return owned is not None


async def release(
    db: Executor,
    name: str,
    slot: datetime,
    run_id: str,
    result: str,
    duration_seconds: float,
    next_attempt_at: datetime,
    counted: bool,
    error: str | None,
) -> bool:
    owned = await db.fetchval(
        sql("timer_slots_release"),
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


async def prune(db: Executor, before: datetime, limit: int) -> int:
    return int(await db.fetchval(sql("timer_slots_prune"), before, limit))
