"""Bounded reconciliation on real PostgreSQL: repairs missed rows with the event path's keys,
an interrupted batch leaves the watermark where it was and the rerun converges, the event
path and reconciliation racing on one source give one row, and the scan is bounded."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from db import business_units as units_repo
from db import reconcile_watermarks as watermarks_repo
from db import reminder_settings as settings_repo
from db import report_subscriptions as subscriptions_repo
from db import sources as sources_repo
from db.connector import transaction
from db.queries import sql
from devkit.harness.automation import (
    T0,
    TARGET,
    make_runtime,
    setting_msg,
    source_msg,
    subscription_msg,
)
from devkit.harness.automation_inputs import BU, Inputs, by_status, rows, unit_msg
from streams.runtime import Runtime
from streams.slices.automation.planner import Planner
from streams.slices.automation.reconcile import (
    REPORTS_PROVIDER,
    SOURCES_PROVIDER,
    ReconcileConfig,
    Reconciliation,
)
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration
AS_OF = T0 + timedelta(hours=1)


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    yield rt
    await rt.close()


def key(setting: uuid.UUID, source: uuid.UUID, offset: int) -> str:
    return f"reminder:{setting}:Doc:{source}:ExpiresOn:{TARGET.isoformat()}:{offset}"


async def missed(pool: asyncpg.Pool, n: int) -> tuple[uuid.UUID, list[uuid.UUID]]:
    """Projections written without planning (events whose rows were lost), one source per
    updated_on instant so the keyset order is known."""
    setting, sources = uuid.uuid4(), [uuid.uuid4() for _ in range(n)]
    async with transaction(pool) as conn:
        await units_repo.upsert(conn, [unit_msg()], T0)
        await settings_repo.upsert(conn, [setting_msg(setting)], T0)
        for i, s in enumerate(sources):
            await sources_repo.upsert(conn, [source_msg(s)], T0 + timedelta(seconds=i))
    return setting, sources


def reconciliation(
    runtime: Runtime,
    planner: Planner,
    providers: tuple[str, ...] = (SOURCES_PROVIDER, REPORTS_PROVIDER),
    **config: Any,
) -> Reconciliation:
    cfg = ReconcileConfig(units=(BU,), batch_size=2, settle=timedelta(0), **config)
    return Reconciliation(runtime, planner, cfg, providers=providers)


class FailOnCall:
    """Wraps the planner's for_sources: raises on the n-th call (mid-run, inside a batch)."""

    def __init__(self, planner: Planner, n: int) -> None:
        self.planner, self.n, self.calls = planner, n, 0
        self.inner = planner.for_sources

    async def __call__(self, *args: Any, **kw: Any) -> Any:
        self.calls += 1
        result = await self.inner(*args, **kw)
        if self.calls == self.n:
            raise RuntimeError("injected failure after the batch's writes")
        return result


async def test_reconciliation_repairs_missed_rows_with_the_event_paths_keys(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    setting, sources = await missed(pool, 5)
    inputs = Inputs(runtime)
    result = await reconciliation(runtime, inputs.planner).run_once(
        RunContext.at(AS_OF, clock=runtime.clock)
    )
    assert (result.sources, result.batches) == (5, 3)
    assert (await by_status(pool)) == {
        "Pending": {key(setting, s, o) for s in sources for o in (30, 7)}
    }
    again = await reconciliation(runtime, inputs.planner).run_once(
        RunContext.at(AS_OF, clock=runtime.clock)
    )
    assert again.sources == 0  # nothing changed since the watermark


async def test_interrupted_batch_keeps_the_watermark_and_the_rerun_converges(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    setting, sources = await missed(pool, 5)
    planner = Inputs(runtime).planner
    planner.for_sources = FailOnCall(planner, 2)  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="injected"):
        await reconciliation(runtime, planner).run_once(RunContext.at(AS_OF, clock=runtime.clock))
    async with transaction(pool) as conn:
        mark = await watermarks_repo.get(conn, SOURCES_PROVIDER)
    # The first batch committed (sources 0-1); the second rolled back with its watermark.
    assert mark is not None and mark.cursor_guid == sources[1]
    assert mark.watermark == T0 + timedelta(seconds=1)
    assert set(await rows(pool)) == {key(setting, s, o) for s in sources[:2] for o in (30, 7)}
    rerun = Inputs(runtime).planner
    result = await reconciliation(runtime, rerun).run_once(
        RunContext.at(AS_OF, clock=runtime.clock)
    )
    assert result.sources == 3
    assert (await by_status(pool)) == {
        "Pending": {key(setting, s, o) for s in sources for o in (30, 7)}
    }


async def test_reconciliation_and_event_path_racing_on_one_source_give_one_row(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    setting, (source,) = await missed(pool, 1)
    inputs = Inputs(runtime)
    await asyncio.gather(
        inputs.send(source_msg(source, version=2)),
        reconciliation(runtime, inputs.planner).run_once(RunContext.at(AS_OF, clock=runtime.clock)),
        reconciliation(runtime, Inputs(runtime).planner).run_once(
            RunContext.at(AS_OF, clock=runtime.clock)
        ),
    )
    found = await rows(pool)
    assert set(found) == {key(setting, source, 30), key(setting, source, 7)}
    assert {r["status_id"] for r in found.values()} == {"Pending"}
    assert all(not r["is_on_support_hold"] for r in found.values())


async def test_reconciliation_bounds_allowlist_and_due_window(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    setting, (source,) = await missed(pool, 1)
    other_bu = uuid.uuid4()
    async with transaction(pool) as conn:
        await units_repo.upsert(conn, [unit_msg(bu=other_bu)], T0)
        await settings_repo.upsert(conn, [setting_msg(uuid.uuid4(), business_unit_id=other_bu)], T0)
        await sources_repo.upsert(conn, [source_msg(uuid.uuid4(), business_unit_id=other_bu)], T0)
    planner = Inputs(runtime).planner
    # Window of 10 days: the offset-7 row (Dec 24) is beyond it, the offset-30 one (Dec 1) in.
    result = await reconciliation(runtime, planner, window_days=10).run_once(
        RunContext.at(AS_OF, clock=runtime.clock)
    )
    assert result.sources == 1
    assert set(await rows(pool)) == {key(setting, source, 30)}
    # An empty allowlist reconciles nothing.
    off = Reconciliation(runtime, planner, ReconcileConfig(units=()))
    assert (await off.run_once(RunContext.at(AS_OF, clock=off.runtime.clock))).batches == 0


async def test_reconciliation_statement_is_bounded(pool: asyncpg.Pool) -> None:
    statement = sql("sources_reconcile_page")
    for bound in ("s.is_active", "business_unit_id = ANY($1", "> ($2", "<= $5", "LIMIT $6"):
        assert bound in statement
    await missed(pool, 50)
    async with pool.acquire() as conn:
        await conn.execute("ANALYZE automation.sources")
        # Small test tables make a sequential scan cheapest; with it off the plan shows the
        # access path production data gets (the partial keyset index under a Limit).
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(
            r[0]
            for r in await conn.fetch(
                "EXPLAIN " + statement,
                [BU],
                T0,
                "",
                None,
                AS_OF,
                100,
            )
        )
    assert plan.lstrip().startswith("Limit")
    assert "ix_sources_reconcile" in plan


async def test_reconciliation_rolls_report_runs_forward(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    sub = uuid.uuid4()
    async with transaction(pool) as conn:
        await units_repo.upsert(conn, [unit_msg()], T0)
        await subscriptions_repo.upsert(conn, [subscription_msg(sub)], T0)
    planner = Inputs(runtime).planner
    first = await reconciliation(runtime, planner).run_once(
        RunContext.at(AS_OF, clock=runtime.clock)
    )
    assert (first.subscriptions, len(await rows(pool))) == (1, 7)
    # A day later the window has moved one period on: one more row, the same keys before.
    before = set(await rows(pool))
    await reconciliation(runtime, planner).run_once(
        RunContext.at(AS_OF + timedelta(days=1), clock=runtime.clock)
    )
    after = set(await rows(pool))
    assert before < after and len(after - before) == 1


# --- the settings and business-unit repair paths ---------------------------------------------


async def planned_then_reconciled(
    pool: asyncpg.Pool, runtime: Runtime
) -> tuple[Inputs, uuid.UUID, uuid.UUID]:
    """Rows planned by the event path, then one reconciliation run of every path (every
    watermark now past the setting, the source and the BU)."""
    inputs = Inputs(runtime)
    setting, source = uuid.uuid4(), uuid.uuid4()
    await inputs.send(unit_msg(), setting_msg(setting), source_msg(source))
    cfg = ReconcileConfig(units=(BU,), batch_size=2, settle=timedelta(0))
    await Reconciliation(runtime, inputs.planner, cfg).run_once(
        RunContext.at(AS_OF, clock=runtime.clock)
    )
    return inputs, setting, source


def every_path(runtime: Runtime, planner: Planner) -> Reconciliation:
    """The worker's reconciliation: every provider's repair path (the defaults)."""
    cfg = ReconcileConfig(units=(BU,), batch_size=2, settle=timedelta(0))
    return Reconciliation(runtime, planner, cfg)


async def test_a_dropped_setting_change_is_repaired_by_the_next_reconciliation(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    inputs, setting, source = await planned_then_reconciled(pool, runtime)
    assert (await by_status(pool)) == {
        "Pending": {key(setting, source, 30), key(setting, source, 7)}
    }
    # The offset change 30,7 → 30,14 reaches the projection but its planning is lost.
    dropped = AS_OF + timedelta(hours=1)
    async with transaction(pool) as conn:
        await settings_repo.upsert(
            conn, [setting_msg(setting, offsets_days=[30, 14], version=2)], dropped
        )
    result = await every_path(runtime, inputs.planner).run_once(
        RunContext.at(dropped + timedelta(hours=1), clock=runtime.clock)
    )
    assert (result.settings, result.sources, result.units) == (1, 0, 0)
    # The event path's outcome (test_offset_change_deactivates_and_recreates): same keys.
    status = await by_status(pool)
    assert status == {
        "Pending": {key(setting, source, 30), key(setting, source, 14)},
        "Deactivated": {key(setting, source, 7)},
    }
    found = await rows(pool)
    assert found[key(setting, source, 7)]["status_reason_code"] == "ReminderSettingInactive"
    assert found[key(setting, source, 14)]["scheduled_on"] == datetime(
        2026, 12, 17, 9, 0, tzinfo=UTC
    )
    again = await every_path(runtime, inputs.planner).run_once(
        RunContext.at(dropped + timedelta(hours=2), clock=runtime.clock)
    )
    assert (again.settings, again.batches) == (0, 0)  # the watermark moved past it


async def test_a_dropped_time_zone_change_is_repaired_by_the_next_reconciliation(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    inputs, setting, source = await planned_then_reconciled(pool, runtime)
    before = await rows(pool)
    assert before[key(setting, source, 7)]["scheduled_on"] == datetime(
        2026, 12, 24, 9, 0, tzinfo=UTC
    )
    # The BU moves from UTC to Europe/Berlin; the projection has it, the planning is lost.
    dropped = AS_OF + timedelta(hours=1)
    async with transaction(pool) as conn:
        await units_repo.upsert(conn, [unit_msg(zone="Europe/Berlin", version=2)], dropped)
    result = await every_path(runtime, inputs.planner).run_once(
        RunContext.at(dropped + timedelta(hours=1), clock=runtime.clock)
    )
    assert (result.units, result.sources, result.settings) == (1, 0, 0)
    after = await rows(pool)
    assert set(after) == set(before)  # the zone is not in the key: same rows, moved in place
    for offset, day in ((30, 1), (7, 24)):
        r = after[key(setting, source, offset)]
        assert (r["status_id"], r["scheduled_on"], r["time_zone_id"]) == (
            "Pending",
            datetime(2026, 12, day, 8, 0, tzinfo=UTC),  # 09:00 CET
            "Europe/Berlin",
        )
    # What the event path gives for the same change: the same instants.
    await Inputs(runtime).send(unit_msg(zone="Europe/Berlin", version=3))
    assert {k: r["scheduled_on"] for k, r in (await rows(pool)).items()} == {
        k: r["scheduled_on"] for k, r in after.items()
    }


@pytest.mark.parametrize(
    ("statement", "table", "index"),
    [
        (
            "reminder_settings_reconcile_page",
            "reminder_settings",
            "ix_reminder_settings_reconcile",
        ),
        ("business_units_reconcile_page", "business_units", "ix_business_units_reconcile"),
    ],
)
async def test_the_settings_and_units_repair_scans_are_bounded(
    pool: asyncpg.Pool, statement: str, table: str, index: str
) -> None:
    text = sql(statement)
    for bound in ("business_unit_id = ANY($1", "> ($2", "<= $4", "LIMIT $5"):
        assert bound in text
    await missed(pool, 3)
    async with pool.acquire() as conn:
        await conn.execute(f"ANALYZE automation.{table}")
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(
            r[0] for r in await conn.fetch("EXPLAIN " + text, [BU], T0, None, AS_OF, 100)
        )
    assert plan.lstrip().startswith("Limit")
    assert index in plan
