"""Repository of ``automation.reminder_settings``: one function per statement in
``db/queries/reminder_settings.sql``. The writer applies a state only when its Version is
newer."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import asyncpg

from db.connector import Connection
from db.queries import sql
from db.reconcile_watermarks import Changed, Watermark
from streams.contracts.automation import (
    Comparator,
    DeliveryChannel,
    FiringPolicy,
    ReminderSettingChanged,
    Threshold,
    TriggerType,
)
from streams.domain.automation.delivery import DeliverySettings
from streams.domain.automation.revalidation import SettingState


def _setting(r: asyncpg.Record) -> ReminderSettingChanged:
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


def _state(r: asyncpg.Record) -> SettingState:
    return SettingState(
        setting_guid=r["setting_guid"],
        source_type=r["source_type"],
        trigger_type=TriggerType(r["trigger_type"]),
        trigger_key=r["trigger_key"],
        offsets_days=tuple(r["offsets_days"]),
        active=r["active"],
        threshold_metric_key=r["threshold_metric_key"],
        threshold_value=r["threshold_value"],
        threshold_comparator=(
            Comparator(r["threshold_comparator"]) if r["threshold_comparator"] else None
        ),
        threshold_firing_policy=(
            FiringPolicy(r["threshold_firing_policy"]) if r["threshold_firing_policy"] else None
        ),
    )


def _delivery(r: asyncpg.Record) -> DeliverySettings:
    return DeliverySettings(
        r["setting_guid"],
        r["template_id"],
        tuple(DeliveryChannel(c) for c in r["delivery_channels"]),
        tuple(r["recipient_attributes"]),
    )


async def upsert(
    conn: Connection, settings: Sequence[ReminderSettingChanged], now: datetime
) -> set[UUID]:
    if not settings:
        return set()
    t = [s.threshold for s in settings]
    rows = await conn.fetch(
        sql("reminder_settings_upsert"),
        [s.setting_guid for s in settings],
        [s.business_unit_id for s in settings],
        [s.source_type for s in settings],
        [s.trigger_type.value for s in settings],
        [s.trigger_key for s in settings],
        [",".join(str(d) for d in sorted(set(s.offsets_days))) for s in settings],
        [s.send_time_local for s in settings],
        [x.metric_key if x else None for x in t],
        [x.value if x else None for x in t],
        [x.comparator.value if x else None for x in t],
        [x.firing_policy.value if x else None for x in t],
        [s.active for s in settings],
        [s.version for s in settings],
        now,
        [s.template_id for s in settings],
        [json.dumps([c.value for c in s.delivery_channels]) for s in settings],
        [json.dumps(s.recipient_attributes) for s in settings],
        [s.recurrence.value if s.recurrence else None for s in settings],
        [s.immediate_notification for s in settings],
    )
    return {r["setting_guid"] for r in rows}


@dataclass(frozen=True, slots=True)
class StoredSetting:
    """A stored setting, as each reader takes it (built when asked for): the state planning
    reads, what revalidation compares, the delivery configuration resolved at execution."""

    row: asyncpg.Record

    @property
    def change(self) -> ReminderSettingChanged:
        return _setting(self.row)

    @property
    def state(self) -> SettingState:
        return _state(self.row)

    @property
    def delivery(self) -> DeliverySettings:
        return _delivery(self.row)


async def get_by_guid(conn: Connection, guids: Collection[UUID]) -> dict[UUID, StoredSetting]:
    if not guids:
        return {}
    rows = await conn.fetch(sql("reminder_settings_get_by_guid"), list(set(guids)))
    return {r["setting_guid"]: StoredSetting(r) for r in rows}


async def changes_get(
    conn: Connection, guids: Collection[UUID]
) -> dict[UUID, ReminderSettingChanged]:
    return {g: s.change for g, s in (await get_by_guid(conn, guids)).items()}


async def states_get(conn: Connection, guids: Collection[UUID]) -> dict[UUID, SettingState]:
    return {g: s.state for g, s in (await get_by_guid(conn, guids)).items()}


async def delivery_get(conn: Connection, guids: Collection[UUID]) -> dict[UUID, DeliverySettings]:
    return {g: s.delivery for g, s in (await get_by_guid(conn, guids)).items()}


async def of_units(conn: Connection, units: Collection[UUID]) -> list[ReminderSettingChanged]:
    """Active settings of the given BUs (every SourceType)."""
    if not units:
        return []
    return [
        _setting(r) for r in await conn.fetch(sql("reminder_settings_of_units"), list(set(units)))
    ]


async def reconcile_page(
    conn: Connection,
    units: Collection[UUID],
    mark: Watermark,
    until: datetime,
    limit: int,
) -> list[Changed]:
    rows = await conn.fetch(
        sql("reminder_settings_reconcile_page"),
        list(units),
        mark.watermark,
        mark.cursor_guid,
        until,
        limit,
    )
    return [Changed(r["setting_guid"], r["business_unit_id"], r["updated_on"]) for r in rows]
