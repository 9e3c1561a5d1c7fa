"""Ensure and Deactivate on real PostgreSQL: every row of the seed's Ensure table."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from db import scheduler as repo
from db.connector import transaction
from devkit.harness.automation import (
    T0,
    TARGET,
    make_runtime,
    reminder,
    row,
    scheduler_rows,
)
from streams.domain.automation.rules import (
    MANUAL_CANCEL,
    ReminderDateInput,
    RowState,
    SchedulerCandidate,
    SchedulerStatus,
    ensure_decision,
)
from streams.runtime import Runtime

pytestmark = pytest.mark.integration


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    yield rt
    await rt.close()


async def ensure(pool: asyncpg.Pool, *candidates: SchedulerCandidate) -> list[repo.EnsuredRow]:
    async with transaction(pool) as conn:
        return await repo.ensure(conn, candidates, T0)


async def force(pool: asyncpg.Pool, key: str, **columns: Any) -> None:
    """Put a row into a state directly (tests only)."""
    sets = ", ".join(f"{c} = ${i + 2}" for i, c in enumerate(columns))
    await pool.execute(
        f"UPDATE automation.scheduler SET {sets} WHERE scheduler_key = $1", key, *columns.values()
    )


def fresh() -> SchedulerCandidate:
    return reminder(uuid.uuid4(), uuid.uuid4())


async def test_no_row_inserts_a_pending_row(pool: asyncpg.Pool) -> None:
    c = fresh()
    [result] = await ensure(pool, c)
    assert (result.outcome, result.status, result.version) == ("Inserted", "Pending", 1)
    r = await row(pool, c.key)
    assert (r["automation_type_id"], r["trigger_type_id"], r["input_hash"]) == (
        "Reminder",
        "DateBased",
        c.input_hash,
    )
    assert (r["scheduled_on"], r["scheduled_local_date"], r["time_zone_id"]) == (
        T0,
        T0.date(),
        "UTC",
    )
    assert (r["setting_guid"], r["source_type"], r["source_guid"]) == (
        c.setting_guid,
        "Doc",
        c.source_guid,
    )
    # A replay writes nothing: same version, same stamp.
    [again] = await ensure(pool, c)
    assert (again.outcome, again.version) == ("Unchanged", 1)


@pytest.mark.parametrize("status", ["Failed", "Deactivated", "Cancelled"])
async def test_compatible_row_is_reactivated_keeping_diagnostics_attempts_and_coordinates(
    pool: asyncpg.Pool, status: str
) -> None:
    c = fresh()
    await ensure(pool, c)
    diagnostics = {
        "status_id": status,
        "status_reason_code": "SourceNoLongerValid",
        "retry_count": 2,
        "next_retry_on": T0 + timedelta(minutes=15),
        "failure_reason_code": "HandlerError",
        "last_error": "RuntimeError",
        "dispatch_result_json": {"Topic": "t", "Key": c.key},
    }
    await force(pool, c.key, **diagnostics)
    moved = SchedulerCandidate(c.input, T0 + timedelta(hours=2), T0.date(), "Europe/Paris")
    [result] = await ensure(pool, moved)
    assert (result.outcome, result.status) == ("Reactivated", "Pending")
    r = await row(pool, c.key)
    assert r["status_id"] == "Pending" and r["status_reason_code"] is None
    assert (r["scheduled_on"], r["time_zone_id"]) == (T0 + timedelta(hours=2), "Europe/Paris")
    for column in (
        "retry_count",
        "next_retry_on",
        "failure_reason_code",
        "last_error",
        "dispatch_result_json",
    ):
        assert r[column] == diagnostics[column], column
    assert result.dispatch_result == diagnostics["dispatch_result_json"]


async def test_reactivation_never_lifts_a_support_hold(pool: asyncpg.Pool) -> None:
    c = fresh()
    await ensure(pool, c)
    await force(pool, c.key, status_id="Failed", is_on_support_hold=True, retry_count=4)
    [result] = await ensure(pool, c)
    assert (result.outcome, result.status, result.is_on_support_hold) == (
        "Reactivated",
        "Pending",
        True,
    )


async def test_pending_row_send_time_change_updates_in_place(pool: asyncpg.Pool) -> None:
    c = fresh()
    await ensure(pool, c)
    later = SchedulerCandidate(c.input, T0 + timedelta(hours=1), T0.date(), "UTC")
    [result] = await ensure(pool, later)
    assert (result.outcome, result.version) == ("Updated", 2)
    assert (await row(pool, c.key))["scheduled_on"] == T0 + timedelta(hours=1)


async def test_completed_row_returns_its_coordinates_and_is_never_resent(
    pool: asyncpg.Pool,
) -> None:
    c = fresh()
    await ensure(pool, c)
    coordinates = {"Topic": "pin.automation.dispatch-requested.v1", "Key": c.key}
    await force(pool, c.key, status_id="Completed", dispatch_result_json=coordinates)
    later = SchedulerCandidate(c.input, T0 + timedelta(days=1))
    [result] = await ensure(pool, later)
    assert (result.outcome, result.status, result.dispatch_result) == (
        "AlreadyCompleted",
        "Completed",
        coordinates,
    )
    r = await row(pool, c.key)
    assert (r["status_id"], r["scheduled_on"], r["version"]) == ("Completed", T0, 1)


async def test_processing_row_is_left_to_its_claim(pool: asyncpg.Pool) -> None:
    c = fresh()
    await ensure(pool, c)
    await force(
        pool, c.key, status_id="Processing", processing_lease_expires_on=T0 + timedelta(minutes=1)
    )
    [result] = await ensure(pool, SchedulerCandidate(c.input, T0 + timedelta(hours=3)))
    assert (result.outcome, result.status, result.version) == ("InFlight", "Processing", 1)


async def test_completed_row_with_a_different_hash_returns_its_coordinates_and_is_not_held(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    """The seed's Ensure table: a Completed row returns its coordinates and is never re-sent,
    whatever the candidate's InputHash; history never goes on support hold (nor into the
    on-hold gauge)."""
    c = fresh()
    await ensure(pool, c)
    coordinates = {"Topic": "pin.automation.dispatch-requested.v1", "Key": c.key}
    stored = "ab" * 32
    await force(
        pool, c.key, status_id="Completed", input_hash=stored, dispatch_result_json=coordinates
    )
    before = await row(pool, c.key)
    rows = scheduler_rows(runtime)
    async with transaction(pool) as conn:
        [result] = await rows.ensure(
            conn, [SchedulerCandidate(c.input, T0 + timedelta(days=1))], T0
        )
    assert (result.outcome, result.status, result.is_on_support_hold, result.dispatch_result) == (
        "AlreadyCompleted",
        "Completed",
        False,
        coordinates,
    )
    after = await row(pool, c.key)
    assert dict(after) == dict(before)
    async with transaction(pool) as conn:
        stats = await repo.backlog_stats(conn, T0)
    assert stats.on_hold == 0


@pytest.mark.parametrize("status", ["Pending", "Failed", "Deactivated"])
async def test_same_key_different_hash_holds_the_row_and_never_overwrites(
    pool: asyncpg.Pool, runtime: Runtime, status: str
) -> None:
    c = fresh()
    await ensure(pool, c)
    stored = "ab" * 32
    await force(pool, c.key, input_hash=stored, status_id=status)
    before = await row(pool, c.key)
    rows = scheduler_rows(runtime)
    moved = SchedulerCandidate(c.input, T0 + timedelta(hours=5), T0.date(), "Asia/Tokyo")
    async with transaction(pool) as conn:
        [result] = await rows.ensure(conn, [moved], T0)
    assert (result.outcome, result.status, result.is_on_support_hold) == ("Conflict", status, True)
    after = await row(pool, c.key)
    # Both hashes recorded; nothing of the stored row overwritten.
    assert (after["input_hash"], after["conflict_input_hash"]) == (stored, c.input_hash)
    assert after["failure_reason_code"] == "InputHashConflict"
    for column in ("status_id", "scheduled_on", "scheduled_local_date", "time_zone_id"):
        assert after[column] == before[column], column
    # The same conflict again writes nothing more.
    async with transaction(pool) as conn:
        [again] = await rows.ensure(conn, [moved], T0)
    assert again.outcome == "Conflict" and again.version == after["version"]
    sample = runtime.metrics.registry.get_sample_value
    assert sample("automation_scheduler_ensure_total", {"outcome": "Conflict"}) == 2


async def test_sql_agrees_with_the_pure_decision_table(pool: asyncpg.Pool) -> None:
    """Every (status, same/different hash, same/moved schedule) through both."""
    cases = []
    # Cancelled twice: by the system (no reason here) and by an operator (ManualCancel).
    states = [(s, None) for s in SchedulerStatus] + [(SchedulerStatus.CANCELLED, MANUAL_CANCEL)]
    for status, reason in states:
        for same_hash in (True, False):
            for moved in (False, True):
                c = fresh()
                await ensure(pool, c)
                lease = T0 + timedelta(minutes=1) if status is SchedulerStatus.PROCESSING else None
                h = c.input_hash if same_hash else "cd" * 32
                await force(
                    pool,
                    c.key,
                    status_id=status.value,
                    status_reason_code=reason,
                    input_hash=h,
                    processing_lease_expires_on=lease,
                )
                when = T0 + timedelta(hours=1) if moved else T0
                candidate = SchedulerCandidate(c.input, when, T0.date(), "UTC")
                state = RowState(status, h, T0, T0.date(), "UTC", reason)
                cases.append((candidate, ensure_decision(state, candidate).value))
    results = await ensure(pool, *(c for c, _ in cases))
    by_key = {r.scheduler_key: r.outcome for r in results}
    assert [by_key[c.key] for c, _ in cases] == [want for _, want in cases]


async def test_one_statement_per_batch(pool: asyncpg.Pool) -> None:
    calls: list[str] = []

    class Counting:
        def __init__(self, conn: asyncpg.Connection) -> None:
            self.conn = conn

        async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
            calls.append(query)
            return await self.conn.fetch(query, *args)

    batch = [fresh() for _ in range(300)]
    async with transaction(pool) as conn:
        await repo.ensure(Counting(conn), batch, T0)  # type: ignore[arg-type]
        await repo.deactivate(
            Counting(conn),  # type: ignore[arg-type]
            {c.key: "SourceNoLongerValid" for c in batch},
            "Deactivated",
            T0,
        )
    assert len(calls) == 2


async def test_deactivate_keeps_completed_and_in_flight_rows(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    pending, failed, completed, processing = fresh(), fresh(), fresh(), fresh()
    await ensure(pool, pending, failed, completed, processing)
    await force(pool, failed.key, status_id="Failed", retry_count=4, is_on_support_hold=True)
    await force(pool, completed.key, status_id="Completed")
    await force(
        pool,
        processing.key,
        status_id="Processing",
        processing_lease_expires_on=T0 + timedelta(minutes=1),
    )
    rows = scheduler_rows(runtime)
    keys = [pending.key, failed.key, completed.key, processing.key, "reminder:missing"]
    async with transaction(pool) as conn:
        done = await rows.deactivate(conn, dict.fromkeys(keys, "ReminderSettingInactive"), T0)
    got = {d.scheduler_key: (d.status, d.changed) for d in done}
    assert got == {
        pending.key: ("Deactivated", True),
        failed.key: ("Deactivated", True),
        completed.key: ("Completed", False),
        processing.key: ("Processing", False),
        "reminder:missing": (None, False),
    }
    r = await row(pool, failed.key)
    assert (r["status_reason_code"], r["retry_count"], r["is_on_support_hold"]) == (
        "ReminderSettingInactive",
        4,
        True,
    )
    async with transaction(pool) as conn:
        await rows.cancel(conn, {pending.key: "Withdrawn"}, T0)
    assert (await row(pool, pending.key))["status_id"] == "Deactivated"  # first reason kept


async def test_concurrent_batches_of_the_same_new_keys_insert_each_once(
    database_url: str, pool: asyncpg.Pool
) -> None:
    setting = uuid.uuid4()
    batch = [
        SchedulerCandidate(ReminderDateInput(setting, "Doc", uuid.uuid4(), "K", TARGET, 1), T0)
        for _ in range(200)
    ]

    async def one(order: list[SchedulerCandidate]) -> list[repo.EnsuredRow]:
        conn = await asyncpg.connect(database_url)
        try:
            async with conn.transaction():
                return await repo.ensure(conn, order, T0)
        finally:
            await conn.close()

    results = await asyncio.gather(*(one(batch[::step]) for step in (1, -1, 1, -1)))
    inserted = sum(1 for rs in results for r in rs if r.outcome == "Inserted")
    assert inserted == 200
    assert all(r.outcome in {"Inserted", "Unchanged"} for rs in results for r in rs)
    assert await pool.fetchval("SELECT count(*) FROM automation.scheduler") == 200
