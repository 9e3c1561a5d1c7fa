"""Repository of ``automation.threshold_states``: one function per statement in
``db/queries/threshold_states.sql``."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from uuid import UUID

from db.connector import Connection
from db.queries import sql
from streams.domain.automation.triggers import ThresholdMemory

# (SettingGuid, SourceType, SourceGuid): the pair a threshold memory belongs to.
Triple = tuple[UUID, str, UUID]


async def get_by_key(
    conn: Connection, triples: Collection[Triple]
) -> dict[Triple, ThresholdMemory]:
    if not triples:
        return {}
    t = list(set(triples))
    rows = await conn.fetch(
        sql("threshold_states_get_by_key"),
        [x[0] for x in t],
        [x[1] for x in t],
        [x[2] for x in t],
    )
    return {
        (r["setting_guid"], r["source_type"], r["source_guid"]): ThresholdMemory(
            r["met"], r["met_since"], r["episode"]
        )
        for r in rows
    }


async def put(conn: Connection, memory: dict[Triple, ThresholdMemory], now: datetime) -> None:
    if not memory:
        return
    items = sorted(memory.items(), key=lambda kv: (str(kv[0][0]), kv[0][1], str(kv[0][2])))
    await conn.execute(
        sql("threshold_states_put"),
        [k[0] for k, _ in items],
        [k[1] for k, _ in items],
        [k[2] for k, _ in items],
        [m.met for _, m in items],
        [m.met_since for _, m in items],
        [m.episode for _, m in items],
        now,
    )
