"""Automation inputs repository: the projections the event path and the bounded
reconciliation read (one function per statement in ``db/queries/automation_inputs.sql``).
States come back as the contract models, so the pure trigger providers take them as they are."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from db.queries import sql
from streams.contracts.automation import (
    BusinessUnitChanged,
    ReminderSettingChanged,
    ReportPeriod,
    ReportSubscriptionChanged,
    SourceEntityChanged,
    Threshold,
)
from streams.domain.automation_triggers import ThresholdMemory

SourceRef = tuple[str, UUID]
Triple = tuple[UUID, str, UUID]


async def units_lock(conn: asyncpg.Connection, units: Collection[UUID]) -> None:
    if units:
        await conn.fetchval(sql("automation_units_lock"), sorted(set(units)))


async def units_upsert(
    conn: asyncpg.Connection, units: Sequence[BusinessUnitChanged], now: datetime
) -> set[UUID]:
    if not units:
        return set()
    rows = await conn.fetch(
        sql("automation_units_upsert"),
        [u.business_unit_id for u in units],
        [u.time_zone_id for u in units],
        [u.version for u in units],
        now,
    )
    return {r["business_unit_id"] for r in rows}


async def units_get(conn: asyncpg.Connection, units: Collection[UUID]) -> dict[UUID, str]:
    if not units:
        return {}
    rows = await conn.fetch(sql("automation_units_get"), list(set(units)))
    return {r["business_unit_id"]: r["time_zone_id"] for r in rows}


def _setting(r: Any) -> ReminderSettingChanged:
    threshold = None
    if r["threshold_metric_key"] is not None:
        threshold = Threshold(
            metric_key=r["threshold_metric_key"],
            value=r["threshold_value"],
            comparator=r["threshold_comparator"],
            firing_policy=r["threshold_firing_policy"],
        )
    return ReminderSettingChanged(
        setting_guid=r["setting_guid"],
        business_unit_id=r["business_unit_id"],
        source_type=r["source_type"],
        trigger_type=r["trigger_type"],
        trigger_key=r["trigger_key"],
        offsets_days=list(r["offsets_days"]),
        send_time_local=r["send_time_local"],
        threshold=threshold,
        active=r["active"],
        version=r["version"],
        recurrence=r["recurrence"],
        immediate_notification=r["immediate_notification"],
    )


async def settings_load(
    conn: asyncpg.Connection, guids: Collection[UUID]
) -> dict[UUID, ReminderSettingChanged]:
    if not guids:
        return {}
    rows = await conn.fetch(sql("automation_settings_load"), list(set(guids)))
    return {r["setting_guid"]: _setting(r) for r in rows}


async def settings_of_units(
    conn: asyncpg.Connection, units: Collection[UUID]
) -> list[ReminderSettingChanged]:
    if not units:
        return []
    return [
        _setting(r) for r in await conn.fetch(sql("automation_settings_of_units"), list(set(units)))
    ]


def _source(r: Any) -> SourceEntityChanged:
    return SourceEntityChanged(
        source_type=r["source_type"],
        source_guid=r["source_guid"],
        business_unit_id=r["business_unit_id"],
        version=r["version"],
        occurred_at=r["occurred_at"],
        is_active=r["is_active"],
        attributes=r["attributes"],
    )


async def sources_load(
    conn: asyncpg.Connection, refs: Collection[SourceRef]
) -> dict[SourceRef, SourceEntityChanged]:
    if not refs:
        return {}
    refs = list(set(refs))
    rows = await conn.fetch(
        sql("automation_sources_load"), [r[0] for r in refs], [r[1] for r in refs]
    )
    return {(r["source_type"], r["source_guid"]): _source(r) for r in rows}


async def sources_of_units(
    conn: asyncpg.Connection, pairs: Collection[tuple[UUID, str]]
) -> list[SourceEntityChanged]:
    if not pairs:
        return []
    pairs = list(set(pairs))
    rows = await conn.fetch(
        sql("automation_sources_of_units"), [p[0] for p in pairs], [p[1] for p in pairs]
    )
    return [_source(r) for r in rows]


async def thresholds_get(
    conn: asyncpg.Connection, triples: Collection[Triple]
) -> dict[Triple, ThresholdMemory]:
    if not triples:
        return {}
    t = list(set(triples))
    rows = await conn.fetch(
        sql("automation_thresholds_get"), [x[0] for x in t], [x[1] for x in t], [x[2] for x in t]
    )
    return {
        (r["setting_guid"], r["source_type"], r["source_guid"]): ThresholdMemory(
            r["met"], r["met_since"], r["episode"]
        )
        for r in rows
    }


async def thresholds_put(
    conn: asyncpg.Connection, memory: dict[Triple, ThresholdMemory], now: datetime
) -> None:
    if not memory:
        return
    items = sorted(memory.items(), key=lambda kv: (str(kv[0][0]), kv[0][1], str(kv[0][2])))
    await conn.execute(
        sql("automation_thresholds_put"),
        [k[0] for k, _ in items],
        [k[1] for k, _ in items],
        [k[2] for k, _ in items],
        [m.met for _, m in items],
        [m.met_since for _, m in items],
        [m.episode for _, m in items],
        now,
    )


async def threshold_rows_dispatched(
    conn: asyncpg.Connection, triples: Collection[Triple]
) -> dict[Triple, frozenset[str]]:
    """The keys of each pair's dispatched ThresholdCondition rows (pairs without: absent)."""
    if not triples:
        return {}
    t = list(set(triples))
    rows = await conn.fetch(
        sql("automation_threshold_rows_dispatched"),
        [x[0] for x in t],
        [x[1] for x in t],
        [x[2] for x in t],
    )
    out: dict[Triple, set[str]] = {}
    for r in rows:
        out.setdefault((r["setting_guid"], r["source_type"], r["source_guid"]), set()).add(
            r["scheduler_key"]
        )
    return {k: frozenset(v) for k, v in out.items()}


@dataclass(frozen=True)
class OpenRow:
    scheduler_key: str
    setting_guid: UUID | None
    source_type: str | None
    source_guid: UUID | None


async def open_rows_of_sources(
    conn: asyncpg.Connection, refs: Collection[SourceRef]
) -> list[OpenRow]:
    if not refs:
        return []
    refs = list(set(refs))
    rows = await conn.fetch(
        sql("automation_open_rows_of_sources"), [r[0] for r in refs], [r[1] for r in refs]
    )
    return [OpenRow(*r) for r in rows]


async def open_rows_of_settings(conn: asyncpg.Connection, guids: Collection[UUID]) -> list[OpenRow]:
    if not guids:
        return []
    rows = await conn.fetch(sql("automation_open_rows_of_settings"), list(set(guids)))
    return [OpenRow(*r) for r in rows]


async def open_rows_of_subscriptions(
    conn: asyncpg.Connection, guids: Collection[UUID]
) -> dict[UUID, set[str]]:
    out: dict[UUID, set[str]] = {g: set() for g in guids}
    if guids:
        for r in await conn.fetch(sql("automation_open_rows_of_subscriptions"), list(set(guids))):
            out[r["subscription_guid"]].add(r["scheduler_key"])
    return out


def _subscription(r: Any) -> ReportSubscriptionChanged:
    # A state may carry both (allowed with a ManualRunGuid): the Cron wins, as when planning.
    return ReportSubscriptionChanged(
        subscription_guid=r["subscription_guid"],
        business_unit_id=r["business_unit_id"],
        cron=r["cron"],
        period=ReportPeriod(r["period"]) if r["period"] and not r["cron"] else None,
        active=r["active"],
        version=r["version"],
    )


async def subscriptions_load(
    conn: asyncpg.Connection, guids: Collection[UUID]
) -> dict[UUID, ReportSubscriptionChanged]:
    if not guids:
        return {}
    rows = await conn.fetch(sql("automation_subscriptions_load"), list(set(guids)))
    return {r["subscription_guid"]: _subscription(r) for r in rows}


async def subscriptions_of_units(
    conn: asyncpg.Connection, units: Collection[UUID]
) -> list[ReportSubscriptionChanged]:
    if not units:
        return []
    rows = await conn.fetch(sql("automation_subscriptions_of_units"), list(set(units)))
    return [_subscription(r) for r in rows]


@dataclass(frozen=True)
class Watermark:
    provider: str
    watermark: datetime
    cursor_type: str = ""
    cursor_guid: UUID | None = None


async def watermark_get(conn: asyncpg.Connection, provider: str) -> Watermark | None:
    r = await conn.fetchrow(sql("automation_watermark_get"), provider)
    return Watermark(*r) if r is not None else None


async def watermark_put(conn: asyncpg.Connection, mark: Watermark, now: datetime) -> None:
    await conn.execute(
        sql("automation_watermark_put"),
        mark.provider,
        mark.watermark,
        mark.cursor_type,
        mark.cursor_guid,
        now,
    )


@dataclass(frozen=True)
class ChangedSource:
    source: SourceEntityChanged
    updated_on: datetime


async def reconcile_sources_page(
    conn: asyncpg.Connection,
    units: Collection[UUID],
    mark: Watermark,
    until: datetime,
    limit: int,
) -> list[ChangedSource]:
    rows = await conn.fetch(
        sql("automation_reconcile_sources_page"),
        list(units),
        mark.watermark,
        mark.cursor_type,
        mark.cursor_guid,
        until,
        limit,
    )
    return [ChangedSource(_source(r), r["updated_on"]) for r in rows]


@dataclass(frozen=True)
class Changed:
    """One entity of a changed-since repair batch: its guid, its BU and its keyset position."""

    guid: UUID
    business_unit_id: UUID
    updated_on: datetime


async def reconcile_settings_page(
    conn: asyncpg.Connection,
    units: Collection[UUID],
    mark: Watermark,
    until: datetime,
    limit: int,
) -> list[Changed]:
    rows = await conn.fetch(
        sql("automation_reconcile_settings_page"),
        list(units),
        mark.watermark,
        mark.cursor_guid,
        until,
        limit,
    )
    return [Changed(r["setting_guid"], r["business_unit_id"], r["updated_on"]) for r in rows]


async def reconcile_units_page(
    conn: asyncpg.Connection,
    units: Collection[UUID],
    mark: Watermark,
    until: datetime,
    limit: int,
) -> list[Changed]:
    rows = await conn.fetch(
        sql("automation_reconcile_units_page"),
        list(units),
        mark.watermark,
        mark.cursor_guid,
        until,
        limit,
    )
    return [Changed(r["business_unit_id"], r["business_unit_id"], r["updated_on"]) for r in rows]


async def reconcile_subscriptions_page(
    conn: asyncpg.Connection, units: Collection[UUID], cursor: UUID | None, limit: int
) -> list[ReportSubscriptionChanged]:
    rows = await conn.fetch(
        sql("automation_reconcile_subscriptions_page"), list(units), cursor, limit
    )
    return [_subscription(r) for r in rows]


async def rows_status_count(conn: asyncpg.Connection, sources: Collection[UUID]) -> dict[str, int]:
    rows = await conn.fetch(sql("automation_rows_status_count"), list(sources))
    return {r["status_id"]: r["n"] for r in rows}
