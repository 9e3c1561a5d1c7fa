"""Helpers for the automation inputs tests: the four appliers on a manual clock, messages."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg

from devkit.harness.automation import scheduler_rows
from streams.contracts.automation import (
    BusinessUnitChanged,
    ReminderSettingChanged,
    ReportSubscriptionChanged,
    SourceEntityChanged,
)
from streams.contracts.base import StateMessage
from streams.domain.automation.triggers import default_providers
from streams.input.consumer import Decoded
from streams.runtime import Runtime
from streams.slices.automation.inputs import (
    PlanningApplier,
    SettingsWriter,
    SourcesWriter,
    SubscriptionsWriter,
    UnitsWriter,
)
from streams.slices.automation.planner import Planned, Planner

BU = UUID(int=7)


class Inputs:
    """The agents' appliers without Kafka: ``send`` applies messages one batch each."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.planner = Planner(scheduler_rows(runtime), default_providers())
        self.woken: list[Planned] = []
        wake = self.woken.append
        self.appliers: dict[type, Any] = {
            SourceEntityChanged: PlanningApplier[SourceEntityChanged](
                runtime, SourcesWriter(self.planner), wake
            ),
            ReminderSettingChanged: PlanningApplier[ReminderSettingChanged](
                runtime, SettingsWriter(self.planner), wake
            ),
            BusinessUnitChanged: PlanningApplier[BusinessUnitChanged](
                runtime, UnitsWriter(self.planner), wake
            ),
            ReportSubscriptionChanged: PlanningApplier[ReportSubscriptionChanged](
                runtime, SubscriptionsWriter(self.planner), wake
            ),
        }

    async def send(self, *messages: StateMessage) -> Any:
        result = None
        for m in messages:
            result = await self.appliers[type(m)]([Decoded(None, m)])  # type: ignore[arg-type]
        return result


def unit_msg(zone: str = "UTC", version: int = 1, bu: UUID = BU) -> BusinessUnitChanged:
    return BusinessUnitChanged(business_unit_id=bu, time_zone_id=zone, version=version)


async def rows(pool: asyncpg.Pool) -> dict[str, asyncpg.Record]:
    found = await pool.fetch("SELECT * FROM automation.scheduler ORDER BY scheduler_key")
    return {r["scheduler_key"]: r for r in found}


async def by_status(pool: asyncpg.Pool) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for key, r in (await rows(pool)).items():
        out.setdefault(r["status_id"], set()).add(key)
    return out


async def complete(pool: asyncpg.Pool, key: str) -> None:
    """Mark a row Completed as the runner would (history the inputs must keep)."""
    await pool.execute(
        "UPDATE automation.scheduler SET status_id = 'Completed', version = version + 1 "
        "WHERE scheduler_key = $1",
        key,
    )


def later(days: int) -> timedelta:
    return timedelta(days=days)


def msg(model: type[Any], data: dict[str, Any]) -> Any:
    return model.model_validate(data)
