"""The four automation input agents' writers (the versioned-state recipe, one StateWriter per
topic): each stores its projection (only newer Versions, the SQL guard decides), then runs the
planner for what it changed, in the same transaction. They only ensure or deactivate rows;
nothing is sent or rendered here.

| topic | projection | replans |
|---|---|---|
| pin.automation.source-events.v1 | automation.sources | the source with its (BU, SourceType)'s settings |
| pin.automation.reminder-settings.v1 | automation.reminder_settings | the setting with its (BU, SourceType)'s sources |
| pin.automation.business-units.v1 | automation.business_units | every setting and report subscription of the BU |
| pin.automation.report-subscriptions.v1 | automation.report_subscriptions | its scheduled runs; a ManualRunGuid → one manual run |

Replays and out-of-order Versions are no-ops: the projection refuses them, nothing is replanned.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Generic, TypeVar

from db import business_units as units_repo
from db import reminder_settings as settings_repo
from db import report_subscriptions as subscriptions_repo
from db import sources as sources_repo
from db.connector import Connection
from streams.contracts.automation import (
    BusinessUnitChanged,
    ReminderSettingChanged,
    ReportSubscriptionChanged,
    SourceEntityChanged,
)
from streams.contracts.base import StateMessage
from streams.domain.automation.reports import manual_run
from streams.domain.automation.rules import norm_text
from streams.input.applier import Origin, StateWriter, VersionedStateApplier, Written
from streams.runtime import Runtime
from streams.slices.automation.planner import Planned, Planner

M = TypeVar("M", bound=StateMessage)


def _digest(message: StateMessage, exclude: set[str]) -> str:
    doc = message.model_dump(mode="json", exclude=exclude)
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class SourcesWriter:
    def __init__(self, planner: Planner) -> None:
        self.planner = planner

    def key(self, message: SourceEntityChanged) -> str:
        return f"{norm_text(message.source_type)}:{message.source_guid}"

    def fingerprint(self, message: SourceEntityChanged) -> str:
        return _digest(message, {"version", "occurred_at"})

    async def write(
        self,
        conn: Connection,
        changed: Sequence[SourceEntityChanged],
        unchanged: Sequence[SourceEntityChanged],
        now: datetime,
        origins: Mapping[str, Origin],
        fingerprints: Mapping[str, str],
    ) -> Written[Planned]:
        changed = [*changed, *unchanged]  # no cheap path: the SQL guard decides all
        # The BU a source is in now and the one it may be leaving: both see this change.
        stored = await sources_repo.changes_get(
            conn, {(norm_text(m.source_type), m.source_guid) for m in changed}
        )
        units = {m.business_unit_id for m in changed} | {
            s.business_unit_id for s in stored.values()
        }
        await units_repo.lock(conn, units)
        applied = await sources_repo.upsert(conn, changed, now)
        planned = await self.planner.for_sources(conn, applied, now)
        return Written({f"{t}:{g}" for t, g in applied}, set(), planned)


class SettingsWriter:
    def __init__(self, planner: Planner) -> None:
        self.planner = planner

    def key(self, message: ReminderSettingChanged) -> str:
        return str(message.setting_guid)

    def fingerprint(self, message: ReminderSettingChanged) -> str:
        return _digest(message, {"version"})

    async def write(
        self,
        conn: Connection,
        changed: Sequence[ReminderSettingChanged],
        unchanged: Sequence[ReminderSettingChanged],
        now: datetime,
        origins: Mapping[str, Origin],
        fingerprints: Mapping[str, str],
    ) -> Written[Planned]:
        changed = [*changed, *unchanged]  # no cheap path: the SQL guard decides all
        await units_repo.lock(conn, {m.business_unit_id for m in changed})
        applied = await settings_repo.upsert(conn, changed, now)
        planned = await self.planner.for_settings(conn, applied, now)
        return Written({str(g) for g in applied}, set(), planned)


class UnitsWriter:
    def __init__(self, planner: Planner) -> None:
        self.planner = planner

    def key(self, message: BusinessUnitChanged) -> str:
        return str(message.business_unit_id)

    def fingerprint(self, message: BusinessUnitChanged) -> str:
        return _digest(message, {"version"})

    async def write(
        self,
        conn: Connection,
        changed: Sequence[BusinessUnitChanged],
        unchanged: Sequence[BusinessUnitChanged],
        now: datetime,
        origins: Mapping[str, Origin],
        fingerprints: Mapping[str, str],
    ) -> Written[Planned]:
        changed = [*changed, *unchanged]  # no cheap path: the SQL guard decides all
        await units_repo.lock(conn, {m.business_unit_id for m in changed})
        applied = await units_repo.upsert(conn, changed, now)
        planned = await self.planner.for_units(conn, applied, now)
        return Written({str(u) for u in applied}, set(), planned)


class SubscriptionsWriter:
    """A message with a ManualRunGuid and no schedule only asks for that run (its own key,
    so a batch never folds it into the subscription's schedule state)."""

    def __init__(self, planner: Planner) -> None:
        self.planner = planner

    def key(self, message: ReportSubscriptionChanged) -> str:
        if message.manual_run_guid is not None and _manual_only(message):
            return f"{message.subscription_guid}:manual:{message.manual_run_guid}"
        return str(message.subscription_guid)

    def fingerprint(self, message: ReportSubscriptionChanged) -> str:
        return _digest(message, {"version"})

    async def write(
        self,
        conn: Connection,
        changed: Sequence[ReportSubscriptionChanged],
        unchanged: Sequence[ReportSubscriptionChanged],
        now: datetime,
        origins: Mapping[str, Origin],
        fingerprints: Mapping[str, str],
    ) -> Written[Planned]:
        changed = [*changed, *unchanged]  # no cheap path: the SQL guard decides all
        await units_repo.lock(conn, {m.business_unit_id for m in changed})
        scheduled = [m for m in changed if not _manual_only(m)]
        applied = await subscriptions_repo.upsert(conn, scheduled, now)
        current = await subscriptions_repo.changes_get(conn, applied)
        planned = await self.planner.for_subscriptions(conn, current.values(), now)
        manual = [
            manual_run(m.subscription_guid, m.manual_run_guid, now)
            for m in changed
            if m.manual_run_guid is not None and (_manual_only(m) or m.subscription_guid in applied)
        ]
        if manual:
            ensured = await self.planner.rows.ensure(conn, manual, now)
            planned.merge(Planned(manual, ensured))
        keys = {str(g) for g in applied} | {self.key(m) for m in changed if _manual_only(m)}
        return Written(keys, set(), planned)


def _manual_only(message: ReportSubscriptionChanged) -> bool:
    return message.cron is None and message.period is None


class PlanningApplier(VersionedStateApplier[M, Planned], Generic[M]):
    """An applier whose writer plans rows; after the commit the runner is woken for the
    earliest row made Pending."""

    def __init__(
        self,
        runtime: Runtime,
        writer: StateWriter[M, Planned],
        wake_for: Callable[[Planned], None],
    ) -> None:
        super().__init__(runtime, writer, None, wake_for)
