"""The port execution handlers load the current state of a batch's rows through
(``AutomationInputs``: reminder settings, sources, report subscriptions, delivery settings,
the full states recurring rows are revalidated on, business units' zones), and its
implementation over the projections in the ``automation`` schema (``PgAutomationInputs``).
PostgreSQL is authoritative at execution; each call loads a whole batch.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol
from uuid import UUID

from db import business_units as units_repo
from db import reminder_settings as settings_repo
from db import report_subscriptions as subscriptions_repo
from db import sources as sources_repo
from db.connector import Connection
from streams.contracts.automation import ReminderSettingChanged, SourceEntityChanged
from streams.domain.automation.delivery import DeliverySettings
from streams.domain.automation.revalidation import SettingState, SourceState, SubscriptionState


class AutomationInputs(Protocol):
    """The port to the current state rows depend on (PostgreSQL is authoritative at
    execution). Each call loads a whole batch."""

    async def reminder_settings(
        self, conn: Connection, guids: Collection[UUID]
    ) -> Mapping[UUID, SettingState]: ...

    async def sources(
        self, conn: Connection, refs: Collection[tuple[str, UUID]]
    ) -> Mapping[tuple[str, UUID], SourceState]: ...

    async def report_subscriptions(
        self, conn: Connection, guids: Collection[UUID]
    ) -> Mapping[UUID, SubscriptionState]: ...

    async def delivery_settings(
        self, conn: Connection, guids: Collection[UUID]
    ) -> Mapping[UUID, DeliverySettings]: ...

    # Recurring rows are revalidated on the full states, and their successor is planned in
    # the BU's zone with the provider's own helpers.
    async def setting_states(
        self, conn: Connection, guids: Collection[UUID]
    ) -> Mapping[UUID, ReminderSettingChanged]: ...

    async def source_states(
        self, conn: Connection, refs: Collection[tuple[str, UUID]]
    ) -> Mapping[tuple[str, UUID], SourceEntityChanged]: ...

    async def unit_zones(self, conn: Connection, units: Collection[UUID]) -> Mapping[UUID, str]: ...


class PgAutomationInputs:
    """``AutomationInputs`` over the projections in the ``automation`` schema."""

    async def reminder_settings(
        self, conn: Connection, guids: Collection[UUID]
    ) -> Mapping[UUID, SettingState]:
        return await settings_repo.states_get(conn, guids)

    async def sources(
        self, conn: Connection, refs: Collection[tuple[str, UUID]]
    ) -> Mapping[tuple[str, UUID], SourceState]:
        return await sources_repo.states_get(conn, refs)

    async def report_subscriptions(
        self, conn: Connection, guids: Collection[UUID]
    ) -> Mapping[UUID, SubscriptionState]:
        return await subscriptions_repo.states_get(conn, guids)

    async def delivery_settings(
        self, conn: Connection, guids: Collection[UUID]
    ) -> Mapping[UUID, DeliverySettings]:
        return await settings_repo.delivery_get(conn, guids)

    async def setting_states(
        self, conn: Connection, guids: Collection[UUID]
    ) -> Mapping[UUID, ReminderSettingChanged]:
        return await settings_repo.changes_get(conn, guids)

    async def source_states(
        self, conn: Connection, refs: Collection[tuple[str, UUID]]
    ) -> Mapping[tuple[str, UUID], SourceEntityChanged]:
        return await sources_repo.changes_get(conn, refs)

    async def unit_zones(self, conn: Connection, units: Collection[UUID]) -> Mapping[UUID, str]:
        return await units_repo.get_by_id(conn, units)
