"""Repository of ``automation.business_units``: one function per statement in
``db/queries/business_units.sql``. ``lock`` serializes the writers of one BU."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from uuid import UUID

from db.connector import Connection
from db.queries import sql
from db.reconcile_watermarks import Changed, Watermark
from streams.contracts.automation import BusinessUnitChanged


async def lock(conn: Connection, units: Collection[UUID]) -> None:
    if units:
        await conn.fetchval(sql("business_units_lock"), sorted(set(units)))


async def upsert(
    conn: Connection, units: Sequence[BusinessUnitChanged], now: datetime
) -> set[UUID]:
    if not units:
        return set()
    rows = await conn.fetch(
        sql("business_units_upsert"),
        [u.business_unit_id for u in units],
        [u.time_zone_id for u in units],
        [u.version for u in units],
        now,
    )
    return {r["business_unit_id"] for r in rows}


async def get_by_id(conn: Connection, units: Collection[UUID]) -> dict[UUID, str]:
    """The time zone of each known BU."""
    if not units:
        return {}
    rows = await conn.fetch(sql("business_units_get_by_id"), list(set(units)))
    return {r["business_unit_id"]: r["time_zone_id"] for r in rows}


async def reconcile_page(
    conn: Connection,
    units: Collection[UUID],
    mark: Watermark,
    until: datetime,
    limit: int,
) -> list[Changed]:
    rows = await conn.fetch(
        sql("business_units_reconcile_page"),
        list(units),
        mark.watermark,
        mark.cursor_guid,
        until,
        limit,
    )
    return [Changed(r["business_unit_id"], r["business_unit_id"], r["updated_on"]) for r in rows]
