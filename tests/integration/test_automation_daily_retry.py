"""Daily retry on real PostgreSQL: only the AutomationTypes approved as long-running
(AUTOMATION_DAILY_RETRY_TYPES) retry once a day after the ladder; every other type is held."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Collection, Mapping
from datetime import datetime, timedelta
from uuid import UUID

import asyncpg
import faust
import pytest

from db import report_subscriptions as subscriptions_repo
from db import scheduler as repo
from db.connector import Connection, transaction
from devkit.harness.automation import (
    LEASE,
    T0,
    cleanup,
    make_runtime,
    row,
    runner,
    seed,
    subscription_msg,
)
from streams.clock import ManualClock
from streams.domain.automation.revalidation import SettingState, SourceState, SubscriptionState
from streams.domain.automation.rules import (
    DAILY_RETRY,
    DEFAULT_INTERRUPTION_ALLOWANCE,
    ReportManualInput,
    SchedulerCandidate,
)
from streams.metrics import Metrics
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.automation import install_core
from streams.slices.automation.config import AutomationConfig
from streams.slices.automation.execution_inputs import PgAutomationInputs
from streams.slices.automation.handlers import HandlerRegistry, default_handlers
from streams.slices.context import SliceContext
from streams.timers.context import RunContext
from streams.timers.store import build_registry
from streams.topics import Topics

pytestmark = pytest.mark.integration


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    yield rt
    await rt.close()


class ReportBackendDown(PgAutomationInputs):
    """Report subscriptions cannot be loaded (a long-running report backend that is down);
    reminders load as usual."""

    async def report_subscriptions(
        self, conn: Connection, guids: Collection[UUID]
    ) -> Mapping[UUID, SubscriptionState]:
        raise RuntimeError("report backend unavailable")

    async def reminder_settings(
        self, conn: Connection, guids: Collection[UUID]
    ) -> Mapping[UUID, SettingState]:
        raise RuntimeError("settings backend unavailable")

    async def sources(
        self, conn: Connection, refs: Collection[tuple[str, UUID]]
    ) -> Mapping[tuple[str, UUID], SourceState]:
        return {}


def handlers(approved: str) -> HandlerRegistry:
    config = AutomationConfig.from_settings(
        Settings(database_url="postgresql://x@h/x", automation_daily_retry_types=approved)
    )
    return default_handlers(ReportBackendDown(), daily_retry=config.daily_retry_types)


async def report_row(pool: asyncpg.Pool) -> SchedulerCandidate:
    sub = uuid.uuid4()
    c = SchedulerCandidate(ReportManualInput(sub, uuid.uuid4()), T0)
    async with transaction(pool) as conn:
        await subscriptions_repo.upsert(conn, [subscription_msg(sub)], T0)
        await repo.ensure(conn, [c], T0)
    return c


async def walk_ladder(runtime: Runtime, registry: HandlerRegistry) -> datetime:
    """Fail attempts 1..4 (the ladder's three steps, then the one after it)."""
    at = T0
    for step in (timedelta(minutes=5), timedelta(minutes=15), timedelta(hours=1), None):
        result = await runner(runtime, registry).run_once(RunContext.at(at, clock=runtime.clock))
        assert result.claimed >= 1
        if step is not None:
            at += step
    return at


async def test_an_approved_long_running_type_retries_daily_and_others_are_held(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    report = await report_row(pool)
    [reminder] = await seed(pool, 1)
    registry = handlers("ReportSubscription")
    last = await walk_ladder(runtime, registry)
    r = await row(pool, report.key)
    assert (r["status_id"], r["retry_count"], r["is_on_support_hold"]) == ("Pending", 4, False)
    assert r["next_retry_on"] == last + DAILY_RETRY
    assert r["failure_reason_code"] == "HandlerError"
    m = await row(pool, reminder.key)
    assert (m["status_id"], m["retry_count"], m["is_on_support_hold"]) == ("Failed", 4, True)
    # A day later it is tried again, and again a day after that if it still fails.
    result = await runner(runtime, registry).run_once(
        RunContext.at(last + DAILY_RETRY, clock=runtime.clock)
    )
    assert result.claimed == 1
    r = await row(pool, report.key)
    assert (r["retry_count"], r["next_retry_on"], r["is_on_support_hold"]) == (
        5,
        last + 2 * DAILY_RETRY,
        False,
    )


async def test_without_the_approval_the_same_type_is_held(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    report = await report_row(pool)
    await walk_ladder(runtime, handlers(""))
    r = await row(pool, report.key)
    assert (r["status_id"], r["retry_count"], r["is_on_support_hold"]) == ("Failed", 4, True)


async def test_an_expired_lease_of_an_approved_type_retries_daily(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    report = await report_row(pool)
    await pool.execute(
        "UPDATE automation.scheduler SET retry_count = 3, interrupted_count = $2 "
        "WHERE scheduler_key = $1",
        report.key,
        DEFAULT_INTERRUPTION_ALLOWANCE,  # spent: this expiry is an attempt
    )
    registry = handlers("ReportSubscription")
    async with transaction(pool) as conn:
        [claimed] = await repo.claim(conn, T0, 10, LEASE.total_seconds())
    expired = T0 + LEASE + timedelta(seconds=1)
    result = await cleanup(runtime, registry).run_once(RunContext.at(expired, clock=runtime.clock))
    assert (result.rescued, result.held) == (1, 0)
    r = await row(pool, report.key)
    assert (r["status_id"], r["retry_count"], r["next_retry_on"]) == (
        "Pending",
        4,
        expired + DAILY_RETRY,
    )
    assert (r["failure_reason_code"], claimed.token + 1) == ("LeaseExpired", r["version"])


async def test_the_worker_takes_the_approval_from_its_settings(database_url: str) -> None:
    runtime = Runtime(
        Settings(database_url=database_url, automation_daily_retry_types="ReportSubscription"),
        metrics=Metrics(),
        clock=ManualClock(T0),
    )
    app = faust.App(f"daily-{id(runtime)}", broker="kafka://127.0.0.1:9", autodiscover=False)
    try:
        core = install_core(
            SliceContext(app, runtime, Topics(app, runtime.settings), build_registry(runtime))
        )
        report, reminder = core.handlers.get("ReportSubscription"), core.handlers.get("Reminder")
        assert report is not None and reminder is not None
        assert (report.daily_retry, reminder.daily_retry) == (True, False)
        # The runner and stale cleanup decide with that same registry.
        assert core.runner.handlers is core.handlers and core.cleanup.handlers is core.handlers
    finally:
        await runtime.close()
