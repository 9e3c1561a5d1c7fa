"""Maintenance schedules: declared as cluster-once, coalescing jobs with their env settings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from devkit.harness.timer_fakes import InMemoryTimerStore
from streams.clock import ManualClock
from streams.maintenance import (
    OutboxRetention,
    RetentionMetrics,
    SlotPruner,
    drain,
    maintenance_schedules,
)
from streams.runtime import Runtime
from streams.settings import Settings
from streams.timers import Misfire, Mode, TimerRegistry
from streams.timers.context import RunContext
from streams.timers.on_pool import OnPool

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)


def _registry(env: dict[str, str]) -> tuple[TimerRegistry, Runtime, InMemoryTimerStore]:
    runtime = Runtime(Settings(outbox_retention_hours=36), clock=ManualClock(T0))
    store = InMemoryTimerStore()
    registry = TimerRegistry(store=store, clock=runtime.clock, environ=env)
    registry.register_all(maintenance_schedules(runtime, store))
    return registry, runtime, store


def test_the_maintenance_schedules_are_declared_as_before() -> None:
    registry, _, _ = _registry({})
    assert registry.names == (
        "outbox-retention",
        "table-retention",
        "timer-slot-prune",
        "worker-heartbeat",
    )
    retention, prune = registry.get("outbox-retention"), registry.get("timer-slot-prune")
    tables = registry.get("table-retention")
    assert retention.cadence.interval == timedelta(hours=1)
    assert tables.cadence.interval == timedelta(hours=1)
    assert (prune.cadence.cron, prune.cadence.timezone) == ("17 3 * * *", None)
    for spec in (retention, tables, prune):
        assert (spec.mode, spec.misfire, spec.max_duration, spec.enabled) == (
            Mode.CLUSTER_ONCE,
            Misfire.COALESCE,
            timedelta(minutes=5),
            True,
        )
    assert retention.settings_prefix == "TIMER_OUTBOX_RETENTION_"
    assert tables.settings_prefix == "TIMER_TABLE_RETENTION_"
    assert prune.settings_prefix == "TIMER_SLOT_PRUNE_"


def test_the_maintenance_schedules_follow_their_env_settings() -> None:
    registry, _, _ = _registry(
        {"TIMER_OUTBOX_RETENTION_INTERVAL_SECONDS": "600", "TIMER_SLOT_PRUNE_ENABLED": "false"}
    )
    assert registry.get("outbox-retention").cadence.interval == timedelta(minutes=10)
    assert registry.get("timer-slot-prune").enabled is False


async def test_the_handlers_prune_the_registry_store_and_retain_per_settings() -> None:
    registry, runtime, store = _registry({})
    prune = registry.get("timer-slot-prune").handler
    assert isinstance(prune, SlotPruner)
    for days in (10, 8, 6):
        await store.claim_slot("job", T0 - timedelta(days=days), "w", f"r{days}")
    assert (await prune.run_once(RunContext.at(T0, clock=runtime.clock))).deleted == 2
    assert len(store.slots) == 1
    retention = registry.get("outbox-retention").handler
    assert isinstance(retention, OnPool)
    built = retention.build(object())  # type: ignore[arg-type]
    assert isinstance(built, OutboxRetention)
    assert built.config.retention == timedelta(hours=36)
    assert runtime.settings.outbox_retention_hours == 36


def test_every_worker_announces_itself_every_ten_seconds() -> None:
    registry, _, _ = _registry({})
    heartbeat = registry.get("worker-heartbeat")
    assert heartbeat.cadence.interval == timedelta(seconds=10)
    assert heartbeat.mode is Mode.EVERY_INSTANCE


async def test_drain_takes_batches_until_one_is_short() -> None:
    sizes = iter([3, 3, 3, 1, 3])

    async def batch() -> int:
        return next(sizes)

    done = await drain(batch, size=3, budget_seconds=60, clock=ManualClock(T0))
    assert (done.rows, done.batches, done.more) == (10, 4, False)


async def test_drain_stops_at_its_budget_after_a_full_batch_and_says_more() -> None:
    clock = ManualClock(T0)

    async def batch() -> int:
        clock.advance(2.0)  # each batch takes 2 s on the injected clock
        return 3

    done = await drain(batch, size=3, budget_seconds=5, clock=clock)
    assert (done.rows, done.batches, done.more, done.seconds) == (9, 3, True, 6.0)
    assert done.rows_per_second == 1.5


def test_bad_table_retention_settings_stop_the_worker_at_declaration() -> None:
    runtime = Runtime(
        Settings(calendar_event_retention_days=30, calendar_tombstone_retention_days=20),
        clock=ManualClock(T0),
    )
    with pytest.raises(ValueError, match="CALENDAR_TOMBSTONE_RETENTION_DAYS"):
        maintenance_schedules(runtime, InMemoryTimerStore())


async def test_slot_prune_counts_its_rows_per_table() -> None:
    registry, runtime, store = _registry({})
    for days in (10, 8, 6):
        await store.claim_slot("job", T0 - timedelta(days=days), "w", f"r{days}")
    await registry.get("timer-slot-prune").handler.run_once(RunContext.at(T0, clock=runtime.clock))
    metrics = runtime.metrics.family(RetentionMetrics)
    assert metrics.last("ops.timer_slots")["last_deleted"] == 2
    value = runtime.metrics.registry.get_sample_value(
        "reminders_retention_deleted_rows_total", {"table": "ops.timer_slots"}
    )
    assert value == 2


async def test_status_shows_every_pruned_table_with_its_horizon_and_last_run() -> None:
    from streams.maintenance.status import retention_status
    from streams.web.page import render_html

    registry, runtime, store = _registry({})
    await store.claim_slot("job", T0 - timedelta(days=9), "w", "r")
    await registry.get("timer-slot-prune").handler.run_once(RunContext.at(T0, clock=runtime.clock))
    rows = retention_status(runtime)
    assert [r["table"] for r in rows] == [
        "ops.outbox",
        "calendar.events",
        "calendar.event_reminders",
        "calendar.event_tombstones",
        "automation.scheduler",
        "ops.timer_slots",
    ]
    by_table = {r["table"]: r for r in rows}
    assert by_table["ops.outbox"]["horizon"] == "published over 36 h ago"
    assert by_table["ops.outbox"]["last_run"] is None  # not run in this worker yet
    slots = by_table["ops.timer_slots"]
    assert (slots["deleted"], slots["last_deleted"], slots["more"]) == (1, 1, False)
    assert slots["last_run"] == T0.isoformat()
    page = render_html({"retention": rows}, True, {})
    assert 'data-k="retention.5.last_deleted">1<' in page


def test_every_worker_has_the_retention_section(tmp_path: Path) -> None:
    from streams.app import create_context

    ctx = create_context(Settings(worker_data_dir=tmp_path))
    assert "retention" in ctx.status_sections
    assert "table-retention" in ctx.registry.names


def test_a_retention_budget_past_a_schedules_max_duration_is_refused() -> None:
    from streams.maintenance.schedules import check_retention_budget
    from streams.timers.schedule import RegistrationError

    for env, budget, ok in [
        ({}, 240.0, True),
        ({}, 300.0, False),
        ({"TIMER_OUTBOX_RETENTION_MAX_DURATION_SECONDS": "900",
          "TIMER_TABLE_RETENTION_MAX_DURATION_SECONDS": "900",
          "TIMER_SLOT_PRUNE_MAX_DURATION_SECONDS": "900"}, 600.0, True),
    ]:  # fmt: skip
        settings = Settings(retention_budget_seconds=budget)
        runtime = Runtime(settings, clock=ManualClock(T0))
        store = InMemoryTimerStore()
        registry = TimerRegistry(store=store, clock=runtime.clock, environ=env)
        registry.register_all(maintenance_schedules(runtime, store))
        if ok:
            check_retention_budget(registry, settings)
        else:
            with pytest.raises(RegistrationError, match=r"RETENTION_BUDGET_SECONDS.*MAX_DURATION"):
                check_retention_budget(registry, settings)
