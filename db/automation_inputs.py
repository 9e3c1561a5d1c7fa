"""Automation projections repository (``automation.reminder_settings``, ``automation.sources``,
``automation.report_subscriptions``): one function per statement in
``db/queries/automation.sql``. Writers apply a state only when its Version is newer."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import datetime
from uuid import UUID

import asyncpg

from db.queries import sql
from streams.contracts.automation import (
    Comparator,
    FiringPolicy,
    ReminderSettingChanged,
    ReportSubscriptionChanged,
    SourceEntityChanged,
    TriggerType,
)
from streams.domain.automation import norm_text
from streams.domain.automation_revalidation import SettingState, SourceState, SubscriptionState


async def settings_upsert(
    conn: asyncpg.Connection, settings: Sequence[ReminderSettingChanged], now: datetime
) -> set[UUID]:
    if not settings:
        return set()
    t = [s.threshold for s in settings]
    rows = await conn.fetch(
        sql("automation_settings_upsert"),
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


async def sources_upsert(
    conn: asyncpg.Connection, sources: Sequence[SourceEntityChanged], now: datetime
) -> set[tuple[str, UUID]]:
    if not sources:
        return set()
    rows = await conn.fetch(
        sql("automation_sources_upsert"),
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


async def subscriptions_upsert(
    conn: asyncpg.Connection, subscriptions: Sequence[ReportSubscriptionChanged], now: datetime
) -> set[UUID]:
    if not subscriptions:
        return set()
    rows = await conn.fetch(
        sql("automation_subscriptions_upsert"),
        [s.subscription_guid for s in subscriptions],
        [s.business_unit_id for s in subscriptions],
        [s.cron for s in subscriptions],
        [s.period.value if s.period else None for s in subscriptions],
        [s.active for s in subscriptions],
        [s.version for s in subscriptions],
        now,
    )
    return {r["subscription_guid"] for r in rows}


async def settings_get(
    conn: asyncpg.Connection, guids: Collection[UUID]
) -> dict[UUID, SettingState]:
    if not guids:
        return {}
    rows = await conn.fetch(sql("automation_settings_get"), list(guids))
    return {
        r["setting_guid"]: SettingState(
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
        for r in rows
    }


async def sources_get(
    conn: asyncpg.Connection, refs: Collection[tuple[str, UUID]]
) -> dict[tuple[str, UUID], SourceState]:
    if not refs:
        return {}
    rows = await conn.fetch(
        sql("automation_sources_get"), [r[0] for r in refs], [r[1] for r in refs]
    )
    return {
        (r["source_type"], r["source_guid"]): SourceState(
            r["source_type"], r["source_guid"], r["is_active"], r["attributes"]
        )
        for r in rows
    }


async def subscriptions_get(
    conn: asyncpg.Connection, guids: Collection[UUID]
) -> dict[UUID, SubscriptionState]:
    if not guids:
        return {}
    rows = await conn.fetch(sql("automation_subscriptions_get"), list(guids))
    return {
        r["subscription_guid"]: SubscriptionState(r["subscription_guid"], r["active"]) for r in rows
    }
