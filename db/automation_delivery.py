"""Execution-time delivery configuration of reminder settings: one function per statement in
``db/queries/automation_delivery.sql``."""

from __future__ import annotations

from collections.abc import Collection
from uuid import UUID

import asyncpg

from db.queries import sql
from streams.contracts.automation import DeliveryChannel
from streams.domain.automation_delivery import DeliverySettings


async def settings_delivery_get(
    conn: asyncpg.Connection, guids: Collection[UUID]
) -> dict[UUID, DeliverySettings]:
    if not guids:
        return {}
    rows = await conn.fetch(sql("automation_settings_delivery_get"), list(set(guids)))
    return {
        r["setting_guid"]: DeliverySettings(
            r["setting_guid"],
            r["template_id"],
            tuple(DeliveryChannel(c) for c in r["delivery_channels"]),
            tuple(r["recipient_attributes"]),
        )
        for r in rows
    }
