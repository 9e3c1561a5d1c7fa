"""Repository of ``automation.report_subscriptions``: one function per statement in
``db/queries/report_subscriptions.sql``. The writer applies a state only when its Version is
newer."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import asyncpg

from db.connector import Connection
from db.queries import sql
from streams.contracts.automation import ReportPeriod, ReportSubscriptionChanged
from streams.domain.automation.revalidation import SubscriptionState


def _subscription(r: asyncpg.Record) -> ReportSubscriptionChanged:
    # A state may carry both (allowed with a ManualRunGuid): the Cron wins, as when planning.
    return ReportSubscriptionChanged(
        subscription_guid=r["subscription_guid"],
        business_unit_id=r["business_unit_id"],
        cron=r["cron"],
        period=ReportPeriod(r["period"]) if r["period"] and not r["cron"] else None,
        active=r["active"],
        version=r["version"],
    )


async def upsert(
    conn: Connection, subscriptions: Sequence[ReportSubscriptionChanged], now: datetime
) -> set[UUID]:
    if not subscriptions:
        return set()
    rows = await conn.fetch(
        sql("report_subscriptions_upsert"),
        [s.subscription_guid for s in subscriptions],
        [s.business_unit_id for s in subscriptions],
        [s.cron for s in subscriptions],
        [s.period.value if s.period else None for s in subscriptions],
        [s.active for s in subscriptions],
        [s.version for s in subscriptions],
        now,
    )
    return {r["subscription_guid"] for r in rows}


@dataclass(frozen=True, slots=True)
class StoredSubscription:
    """A stored subscription, as each reader takes it (built when asked for): its state as
    planning reads it, and what revalidation compares."""

    row: asyncpg.Record

    @property
    def change(self) -> ReportSubscriptionChanged:
        return _subscription(self.row)

    @property
    def state(self) -> SubscriptionState:
        return SubscriptionState(self.row["subscription_guid"], self.row["active"])


async def get_by_guid(conn: Connection, guids: Collection[UUID]) -> dict[UUID, StoredSubscription]:
    if not guids:
        return {}
    rows = await conn.fetch(sql("report_subscriptions_get_by_guid"), list(set(guids)))
    return {r["subscription_guid"]: StoredSubscription(r) for r in rows}


async def changes_get(
    conn: Connection, guids: Collection[UUID]
) -> dict[UUID, ReportSubscriptionChanged]:
    return {g: s.change for g, s in (await get_by_guid(conn, guids)).items()}


async def states_get(conn: Connection, guids: Collection[UUID]) -> dict[UUID, SubscriptionState]:
    return {g: s.state for g, s in (await get_by_guid(conn, guids)).items()}


async def of_units(conn: Connection, units: Collection[UUID]) -> list[ReportSubscriptionChanged]:
    """Active subscriptions of the given BUs."""
    if not units:
        return []
    rows = await conn.fetch(sql("report_subscriptions_of_units"), list(set(units)))
    return [_subscription(r) for r in rows]


async def reconcile_page(
    conn: Connection, units: Collection[UUID], cursor: UUID | None, limit: int
) -> list[ReportSubscriptionChanged]:
    rows = await conn.fetch(sql("report_subscriptions_reconcile_page"), list(units), cursor, limit)
    return [_subscription(r) for r in rows]
