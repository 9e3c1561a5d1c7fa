"""Repository of ``automation.sources``: one function per statement in
``db/queries/sources.sql``. The writer applies a state only when its Version is newer."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import asyncpg

from db.connector import Connection
from db.queries import sql
from db.reconcile_watermarks import Watermark
from streams.contracts.automation import SourceEntityChanged
from streams.domain.automation.revalidation import SourceState
from streams.domain.automation.rules import norm_text

# (SourceType, SourceGuid): the key of a source.
SourceRef = tuple[str, UUID]


def _source(r: asyncpg.Record) -> SourceEntityChanged:
    return SourceEntityChanged(
        source_type=r["source_type"],
        source_guid=r["source_guid"],
        business_unit_id=r["business_unit_id"],
        version=r["version"],
        occurred_at=r["occurred_at"],
        is_active=r["is_active"],
        attributes=r["attributes"],
    )


async def upsert(
    conn: Connection, sources: Sequence[SourceEntityChanged], now: datetime
) -> set[SourceRef]:
    if not sources:
        return set()
    rows = await conn.fetch(
        sql("sources_upsert"),
        # Normalized as in SchedulerKeys, so revalidation finds the source a row names.
        [norm_text(s.source_type) for s in sources],
        [s.source_guid for s in sources],
        [s.business_unit_id for s in sources],
        [s.is_active for s in sources],
        [json.dumps(s.attributes, sort_keys=True) for s in sources],
        [s.version for s in sources],
        [s.occurred_at for s in sources],
        now,
    )
    return {(r["source_type"], r["source_guid"]) for r in rows}


@dataclass(frozen=True, slots=True)
class StoredSource:
    """A stored source, as each reader takes it (built when asked for): its state as planning
    reads it, and what revalidation compares."""

    row: asyncpg.Record

    @property
    def change(self) -> SourceEntityChanged:
        return _source(self.row)

    @property
    def state(self) -> SourceState:
        r = self.row
        return SourceState(r["source_type"], r["source_guid"], r["is_active"], r["attributes"])


async def get_by_key(
    conn: Connection, refs: Collection[SourceRef]
) -> dict[SourceRef, StoredSource]:
    if not refs:
        return {}
    refs = list(set(refs))
    rows = await conn.fetch(sql("sources_get_by_key"), [r[0] for r in refs], [r[1] for r in refs])
    return {(r["source_type"], r["source_guid"]): StoredSource(r) for r in rows}


async def changes_get(
    conn: Connection, refs: Collection[SourceRef]
) -> dict[SourceRef, SourceEntityChanged]:
    return {k: s.change for k, s in (await get_by_key(conn, refs)).items()}


async def states_get(conn: Connection, refs: Collection[SourceRef]) -> dict[SourceRef, SourceState]:
    return {k: s.state for k, s in (await get_by_key(conn, refs)).items()}


async def of_units(
    conn: Connection, pairs: Collection[tuple[UUID, str]]
) -> list[SourceEntityChanged]:
    """Active sources of (BU, SourceType) pairs."""
    if not pairs:
        return []
    pairs = list(set(pairs))
    rows = await conn.fetch(sql("sources_of_units"), [p[0] for p in pairs], [p[1] for p in pairs])
    return [_source(r) for r in rows]


async def of_unit_range(
    conn: Connection, unit: UUID, source_type: str, start: UUID, limit: int
) -> list[SourceEntityChanged]:
    """Active sources of one (BU, SourceType) from SourceGuid ``start`` on (inclusive), in
    SourceGuid order: one chunk of a setting's fan-out."""
    rows = await conn.fetch(sql("sources_of_unit_range"), unit, source_type, start, limit)
    return [_source(r) for r in rows]


@dataclass(frozen=True)
class ChangedSource:
    source: SourceEntityChanged
    updated_on: datetime


async def reconcile_page(
    conn: Connection,
    units: Collection[UUID],
    mark: Watermark,
    until: datetime,
    limit: int,
) -> list[ChangedSource]:
    rows = await conn.fetch(
        sql("sources_reconcile_page"),
        list(units),
        mark.watermark,
        mark.cursor_type,
        mark.cursor_guid,
        until,
        limit,
    )
    return [ChangedSource(_source(r), r["updated_on"]) for r in rows]
