"""Repository of ``automation.reconcile_watermarks``: one function per statement in
``db/queries/reconcile_watermarks.sql``. Also the keyset types the changed-since pages of the
bounded reconciliation share (``reconcile_page`` of each projection)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from db.connector import Connection
from db.queries import sql


@dataclass(frozen=True)
class Watermark:
    provider: str
    watermark: datetime
    cursor_type: str = ""
    cursor_guid: UUID | None = None


@dataclass(frozen=True)
class Changed:
    """One entity of a changed-since repair batch: its guid, its BU and its keyset position."""

    guid: UUID
    business_unit_id: UUID
    updated_on: datetime


async def get(conn: Connection, provider: str) -> Watermark | None:
    r = await conn.fetchrow(sql("reconcile_watermarks_get"), provider)
    return Watermark(*r) if r is not None else None


async def put(conn: Connection, mark: Watermark, now: datetime) -> None:
    await conn.execute(
        sql("reconcile_watermarks_put"),
        mark.provider,
        mark.watermark,
        mark.cursor_type,
        mark.cursor_guid,
        now,
    )
