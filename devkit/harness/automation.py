"""Helpers for automation integration tests: inputs, candidates, a runner on a manual clock."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg

from db import reminder_settings as settings_repo
from db import scheduler as repo
from db import sources as sources_repo
from db.connector import transaction
from streams.clock import ManualClock
from streams.contracts.automation import (
    ReminderSettingChanged,
    ReportSubscriptionChanged,
    SourceEntityChanged,
    TriggerType,
)
from streams.domain.automation.rules import ReminderDateInput, SchedulerCandidate
from streams.metrics import Metrics
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.automation.cleanup import CleanupConfig, StaleCleanup
from streams.slices.automation.handlers import HandlerRegistry, default_handlers
from streams.slices.automation.metrics import AutomationMetrics
from streams.slices.automation.rows import SchedulerRows
from streams.slices.automation.runner import AutomationRunner, RunnerConfig

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TARGET = date(2026, 12, 31)
LEASE = timedelta(seconds=60)


def make_runtime(database_url: str, now: datetime = T0) -> Runtime:
    return Runtime(
        Settings(database_url=database_url, db_pool_max_size=4),
        metrics=Metrics(),
        clock=ManualClock(now),
    )


def runner(
    runtime: Runtime, handlers: HandlerRegistry | None = None, batch_size: int = 200
) -> AutomationRunner:
    return AutomationRunner(
        runtime,
        handlers or default_handlers(),
        RunnerConfig(batch_size=batch_size, lease=LEASE),
    )


def cleanup(runtime: Runtime, handlers: HandlerRegistry | None = None) -> StaleCleanup:
    return StaleCleanup(runtime, handlers or default_handlers(), CleanupConfig(batch_size=50))


def scheduler_rows(runtime: Runtime) -> SchedulerRows:
    return SchedulerRows(runtime.metrics.family(AutomationMetrics))


def setting_msg(setting: UUID, **changes: Any) -> ReminderSettingChanged:
    base: dict[str, Any] = {
        "setting_guid": setting,
        "business_unit_id": UUID(int=7),
        "source_type": "Doc",
        "trigger_type": TriggerType.DATE_BASED,
        "trigger_key": "ExpiresOn",
        "offsets_days": [30, 7],
        "active": True,
        "version": 1,
    }
    return ReminderSettingChanged(**{**base, **changes})


def source_msg(source: UUID, **changes: Any) -> SourceEntityChanged:
    base: dict[str, Any] = {
        "source_type": "Doc",
        "source_guid": source,
        "business_unit_id": UUID(int=7),
        "version": 1,
        "occurred_at": T0 - timedelta(days=30),
        "is_active": True,
        "attributes": {"ExpiresOn": TARGET.isoformat()},
    }
    return SourceEntityChanged(**{**base, **changes})


def subscription_msg(sub: UUID, **changes: Any) -> ReportSubscriptionChanged:
    base: dict[str, Any] = {
        "subscription_guid": sub,
        "business_unit_id": UUID(int=7),
        "period": "Daily",
        "active": True,
        "version": 1,
    }
    return ReportSubscriptionChanged(**{**base, **changes})


def reminder(
    setting: UUID, source: UUID, scheduled_on: datetime = T0, offset: int = 30
) -> SchedulerCandidate:
    inp = ReminderDateInput(setting, "Doc", source, "ExpiresOn", TARGET, offset)
    return SchedulerCandidate(inp, scheduled_on, scheduled_on.date(), "UTC")


async def seed(
    pool: asyncpg.Pool, n: int, scheduled_on: datetime = T0, runtime: Runtime | None = None
) -> list[SchedulerCandidate]:
    """One active setting, ``n`` active sources and their Pending rows due at ``scheduled_on``."""
    setting = uuid.uuid4()
    sources = [uuid.uuid4() for _ in range(n)]
    candidates = [reminder(setting, s, scheduled_on) for s in sources]
    async with transaction(pool) as conn:
        await settings_repo.upsert(conn, [setting_msg(setting)], T0)
        await sources_repo.upsert(conn, [source_msg(s) for s in sources], T0)
        await repo.ensure(conn, candidates, T0)
    return candidates


async def row(pool: asyncpg.Pool, key: str) -> asyncpg.Record:
    r = await pool.fetchrow("SELECT * FROM automation.scheduler WHERE scheduler_key = $1", key)
    assert r is not None, key
    return r


async def statuses(pool: asyncpg.Pool) -> dict[str, int]:
    rows = await pool.fetch(
        "SELECT status_id, count(*) AS n FROM automation.scheduler GROUP BY status_id"
    )
    return {r["status_id"]: r["n"] for r in rows}


async def outbox(pool: asyncpg.Pool) -> Sequence[asyncpg.Record]:
    return await pool.fetch("SELECT id, topic, key, payload, headers FROM ops.outbox ORDER BY id")


def metric(runtime: Runtime, name: str, **labels: str) -> float:
    return runtime.metrics.registry.get_sample_value(name, labels) or 0.0
