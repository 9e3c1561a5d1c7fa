"""Repository of ``automation.fanout_progress``: one function per statement in
``db/queries/fanout_progress.sql``. A setting's fan-out over its (BU, SourceType)'s sources,
saved at the last SourceGuid a committed chunk planned."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from db.connector import Connection
from db.queries import sql


@dataclass(frozen=True)
class Progress:
    setting_guid: UUID
    after_guid: UUID | None
    """The last SourceGuid planned; None = from the first source."""
    horizon: datetime | None
    setting_version: int
    chunks: int
    failures: int
    last_error: str | None
    parked_on: datetime | None


async def request(
    conn: Connection, guids: Collection[UUID], horizon: datetime | None, now: datetime
) -> None:
    if guids:
        await conn.execute(sql("fanout_progress_request"), sorted(set(guids)), horizon, now)


async def get(conn: Connection, guids: Collection[UUID]) -> list[Progress]:
    if not guids:
        return []
    rows = await conn.fetch(sql("fanout_progress_get"), list(set(guids)))
    return [Progress(*r) for r in rows]


async def next_due(conn: Connection, limit: int) -> list[tuple[UUID, UUID | None]]:
    """(SettingGuid, its BU now) of the fan-outs to advance next."""
    rows = await conn.fetch(sql("fanout_progress_next_due"), limit)
    return [(r["setting_guid"], r["business_unit_id"]) for r in rows]


async def advance(conn: Connection, guid: UUID, after: UUID, now: datetime) -> None:
    await conn.execute(sql("fanout_progress_advance"), guid, after, now)


async def done(conn: Connection, guid: UUID) -> None:
    await conn.execute(sql("fanout_progress_done"), guid)


async def failed(
    conn: Connection, guid: UUID, reason: str, park_after: int, now: datetime
) -> tuple[int, datetime | None] | None:
    """Count a failed chunk; (failures in a row, parked_on) or None if the fan-out is gone."""
    r = await conn.fetchrow(sql("fanout_progress_failed"), guid, reason, park_after, now)
    return (r["failures"], r["parked_on"]) if r is not None else None


async def release(conn: Connection, guids: Collection[UUID], now: datetime) -> list[UUID]:
    rows = await conn.fetch(sql("fanout_progress_release"), list(set(guids)), now)
    return [r["setting_guid"] for r in rows]


async def counts(conn: Connection) -> tuple[int, int]:
    """(unfinished, parked) fan-outs."""
    r = await conn.fetchrow(sql("fanout_progress_counts"))
    return (r["unfinished"], r["parked"]) if r is not None else (0, 0)


async def parked(conn: Connection, limit: int) -> list[Progress]:
    return [Progress(*r) for r in await conn.fetch(sql("fanout_progress_parked"), limit)]
