"""Execution on real PostgreSQL: Completed = DispatchRequested in the outbox in the same
transaction; revalidation deactivates with each ReasonCode (an outcome, not a failure)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import asyncpg
import pytest

from db import reminder_settings as settings_repo
from db import report_subscriptions as subscriptions_repo
from db import scheduler as repo
from db import sources as sources_repo
from db.connector import DatabaseUnavailable, transaction
from devkit.harness.automation import (
    T0,
    make_runtime,
    metric,
    outbox,
    reminder,
    row,
    runner,
    seed,
    setting_msg,
    source_msg,
    subscription_msg,
)
from streams.clock import ManualClock
from streams.contracts import DISPATCH_REQUESTED
from streams.contracts.automation import (
    Comparator,
    DispatchRequested,
    FiringPolicy,
    Threshold,
    TriggerType,
)
from streams.domain.automation.rules import (
    DEFAULT_INTERRUPTION_ALLOWANCE,
    ReminderThresholdInput,
    ReportManualInput,
    SchedulerCandidate,
)
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.automation.handlers import default_handlers
from streams.slices.automation.metrics import AutomationMetrics
from streams.slices.automation.runner import AutomationRunner, RunnerConfig
from streams.slices.automation.support import status_section
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    yield rt
    await rt.close()


async def test_completed_means_the_dispatch_request_is_in_the_outbox_with_its_coordinates(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    candidates = await seed(pool, 5)
    result = await runner(runtime, batch_size=2).run_once(
        RunContext.at(T0 + timedelta(seconds=1), clock=runtime.clock)
    )
    assert (result.completed, result.batches, result.fenced) == (5, 3, 0)
    events = await outbox(pool)
    assert sorted(e["key"] for e in events) == sorted(c.key for c in candidates)
    for c in candidates:
        [e] = [e for e in events if e["key"] == c.key]
        assert e["topic"] == DISPATCH_REQUESTED.name
        msg = DispatchRequested.model_validate_json(e["payload"], by_alias=True, by_name=False)
        assert (msg.scheduler_key, msg.input_hash, msg.source_guid) == (
            c.key,
            c.input_hash,
            c.source_guid,
        )
        assert (msg.automation_type.value, msg.trigger_type) == ("Reminder", TriggerType.DATE_BASED)
        assert (msg.scheduled_on, msg.requested_at, msg.retry_count) == (
            T0,
            T0 + timedelta(seconds=1),
            0,
        )
        headers = e["headers"]
        assert headers["event-type"] == "DispatchRequested"
        r = await row(pool, c.key)
        assert r["status_id"] == "Completed" and r["processing_lease_expires_on"] is None
        assert r["dispatch_result_json"] == {
            "Topic": DISPATCH_REQUESTED.name,
            "Key": c.key,
            "RequestedAt": (T0 + timedelta(seconds=1)).isoformat(),
            "Attempt": 1,
            "RunId": result.run_id,
        }
    assert metric(runtime, "automation_scheduler_claimed_total") == 5
    assert (
        metric(runtime, "automation_scheduler_outcomes_total", outcome="completed", reason="") == 5
    )
    assert metric(runtime, "automation_scheduler_due_backlog") == 0
    # Run again: nothing due, nothing re-sent.
    assert (
        await runner(runtime).run_once(RunContext.at(T0 + timedelta(hours=1), clock=runtime.clock))
    ).claimed == 0
    assert len(await outbox(pool)) == 5


async def test_an_outbox_failure_rolls_the_completion_back(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    [c] = await seed(pool, 1)
    await pool.execute(
        """
        CREATE FUNCTION ops.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'outbox refused'; END $$;
        CREATE TRIGGER tr_refuse BEFORE INSERT ON ops.outbox
            FOR EACH STATEMENT EXECUTE FUNCTION ops.refuse();
        """
    )
    with pytest.raises(DatabaseUnavailable):
        await runner(runtime).run_once(RunContext.at(T0, clock=runtime.clock))
    r = await row(pool, c.key)
    # The claim committed (its own transaction); the completion did not: the batch was handed
    # back as interrupted, no attempt counted.
    assert (r["status_id"], r["dispatch_result_json"]) == ("Pending", None)
    assert (r["retry_count"], r["interrupted_count"]) == (0, 1)
    assert await outbox(pool) == []
    # The same error every time is bounded: once the interruption allowance is spent each
    # run is an attempt (Interrupted), and the ladder ends on support hold.
    now = T0
    for _ in range(DEFAULT_INTERRUPTION_ALLOWANCE - 1 + 4):
        now += timedelta(hours=2)
        with pytest.raises(DatabaseUnavailable):
            await runner(runtime).run_once(RunContext.at(now, clock=runtime.clock))
    r = await row(pool, c.key)
    assert (r["status_id"], r["retry_count"], r["is_on_support_hold"]) == ("Failed", 4, True)
    assert (r["interrupted_count"], r["failure_reason_code"], r["last_error"]) == (
        DEFAULT_INTERRUPTION_ALLOWANCE + 4,
        "Interrupted",
        "DatabaseUnavailable",
    )
    assert (
        await runner(runtime).run_once(RunContext.at(now + timedelta(days=1), clock=runtime.clock))
    ).claimed == 0
    assert await outbox(pool) == []


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("source_inactive", "SourceNoLongerValid"),
        ("source_missing", "SourceNoLongerValid"),
        ("target_date_moved", "SourceNoLongerValid"),
        ("setting_inactive", "ReminderSettingInactive"),
        ("offset_removed", "ReminderSettingInactive"),
        ("setting_missing", "ReminderSettingInactive"),
    ],
)
async def test_revalidation_deactivates_with_each_reason_code(
    pool: asyncpg.Pool, runtime: Runtime, change: str, reason: str
) -> None:
    setting, source = uuid.uuid4(), uuid.uuid4()
    c = reminder(setting, source)
    async with transaction(pool) as conn:
        if change != "setting_missing":
            active = change != "setting_inactive"
            offsets = [7] if change == "offset_removed" else [30, 7]
            await settings_repo.upsert(
                conn, [setting_msg(setting, active=active, offsets_days=offsets)], T0
            )
        if change != "source_missing":
            attrs = {"ExpiresOn": "2027-02-01"} if change == "target_date_moved" else None
            extra = {"attributes": attrs} if attrs else {}
            await sources_repo.upsert(
                conn, [source_msg(source, is_active=change != "source_inactive", **extra)], T0
            )
        await repo.ensure(conn, [c], T0)
    result = await runner(runtime).run_once(RunContext.at(T0, clock=runtime.clock))
    assert (result.deactivated, result.failed, result.completed) == ({reason: 1}, 0, 0)
    r = await row(pool, c.key)
    assert (r["status_id"], r["status_reason_code"]) == ("Deactivated", reason)
    # An outcome, not a failure: no attempt counted, no failure reason, nothing sent.
    assert (r["retry_count"], r["failure_reason_code"], r["is_on_support_hold"]) == (0, None, False)
    assert await outbox(pool) == []
    assert (
        metric(runtime, "automation_scheduler_outcomes_total", outcome="deactivated", reason=reason)
        == 1
    )


async def test_report_runs_complete_or_deactivate_with_report_subscription_inactive(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    live, gone = uuid.uuid4(), uuid.uuid4()
    ok = SchedulerCandidate(ReportManualInput(live, uuid.uuid4()), T0)
    dead = SchedulerCandidate(ReportManualInput(gone, uuid.uuid4()), T0)
    async with transaction(pool) as conn:
        await subscriptions_repo.upsert(
            conn, [subscription_msg(live), subscription_msg(gone, active=False)], T0
        )
        await repo.ensure(conn, [ok, dead], T0)
    result = await runner(runtime).run_once(RunContext.at(T0, clock=runtime.clock))
    assert (result.completed, result.deactivated) == (1, {"ReportSubscriptionInactive": 1})
    [e] = await outbox(pool)
    msg = DispatchRequested.model_validate_json(e["payload"], by_alias=True, by_name=False)
    assert (msg.scheduler_key, msg.subscription_guid, msg.trigger_type) == (
        ok.key,
        live,
        TriggerType.MANUAL_RUN,
    )


async def test_threshold_reminder_completes_while_met(pool: asyncpg.Pool, runtime: Runtime) -> None:
    setting, met, not_met = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    threshold = Threshold(
        metric_key="Booked",
        value=90,
        comparator=Comparator.GTE,
        firing_policy=FiringPolicy.ONCE_PER_SOURCE,
    )

    def candidate(source: uuid.UUID) -> SchedulerCandidate:
        inp = ReminderThresholdInput(
            setting, "Doc", source, "Capacity", "Booked", 90, FiringPolicy.ONCE_PER_SOURCE, "source"
        )
        return SchedulerCandidate(inp, T0)

    async with transaction(pool) as conn:
        await settings_repo.upsert(
            conn,
            [
                setting_msg(
                    setting,
                    trigger_type=TriggerType.THRESHOLD_CONDITION,
                    trigger_key="Capacity",
                    offsets_days=[],
                    threshold=threshold,
                )
            ],
            T0,
        )
        await sources_repo.upsert(
            conn,
            [
                source_msg(met, attributes={"Booked": 95}),
                source_msg(not_met, attributes={"Booked": 10}),
            ],
            T0,
        )
        await repo.ensure(conn, [candidate(met), candidate(not_met)], T0)
    result = await runner(runtime).run_once(RunContext.at(T0, clock=runtime.clock))
    assert (result.completed, result.deactivated) == (1, {"SourceNoLongerValid": 1})


async def test_input_hash_drift_holds_the_row_with_both_hashes(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    [c] = await seed(pool, 1)
    await pool.execute(
        "UPDATE automation.scheduler SET input_hash = $2 WHERE scheduler_key = $1", c.key, "e" * 64
    )
    result = await runner(runtime).run_once(RunContext.at(T0, clock=runtime.clock))
    assert (result.held, result.failed, result.completed) == (1, 0, 0)
    r = await row(pool, c.key)
    assert (r["status_id"], r["is_on_support_hold"], r["failure_reason_code"]) == (
        "Pending",
        True,
        "InputHashMismatch",
    )
    assert (r["input_hash"], r["conflict_input_hash"]) == ("e" * 64, c.input_hash)
    section = await status_section(runtime, runtime.metrics.family(AutomationMetrics))()
    assert section["on_hold"] == 1
    [held] = section["held"]
    assert (held["scheduler_key"], held["hold_reason"], held["attempts"]) == (
        c.key,
        "InputHashMismatch",
        0,
    )


class TickingClock(ManualClock):
    """Wall time stands still; every monotonic reading is a second later (a slow batch)."""

    def monotonic(self) -> float:
        self._mono += 1.0
        return self._mono


async def test_backlog_gauges_budget_and_next_wake_up(
    database_url: str, pool: asyncpg.Pool
) -> None:
    await seed(pool, 3, T0 - timedelta(minutes=10))
    await seed(pool, 1, T0 + timedelta(minutes=2))
    runtime = Runtime(Settings(database_url=database_url), clock=TickingClock(T0))
    woken: list[datetime] = []
    r = AutomationRunner(
        runtime,
        default_handlers(),
        RunnerConfig(batch_size=2),
        on_next_due=woken.append,
    )
    try:
        # The first batch "takes" seconds: a second one would not fit in the budget.
        result = await r.run_once(RunContext.at(T0, clock=r.clock, budget=timedelta(seconds=3)))
        assert (result.completed, result.budget_exhausted, result.due_backlog) == (2, True, 1)
        assert result.oldest_due_age_seconds == 600.0
        assert metric(runtime, "automation_scheduler_oldest_due_age_seconds") == 600.0
        assert woken == [T0]  # more is due: run again right away
        result = await r.run_once(RunContext.at(T0, clock=r.clock, budget=timedelta(hours=1)))
        assert (result.completed, result.due_backlog, result.next_due) == (
            1,
            0,
            T0 + timedelta(minutes=2),
        )
        assert woken[-1] == T0 + timedelta(minutes=2)
    finally:
        await runtime.close()
