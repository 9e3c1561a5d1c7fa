"""Bounded reconciliation on real PostgreSQL: repairs missed rows with the event path's keys,
an interrupted batch leaves the watermark where it was and the rerun converges, the event
path and reconciliation racing on one source give one row, and the scan is bounded."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from db import automation_inputs as projections
from db import automation_planning as repo
from db.connector import transaction
from db.queries import sql
from streams.runtime import Runtime
from streams.slices.automation.planning import Planner
from streams.slices.automation.reconcile import (
    SOURCES_PROVIDER,
    ReconcileConfig,
    Reconciliation,
)
from tests.integration.automation_inputs_support import BU, Inputs, by_status, rows, unit_msg
from tests.integration.automation_support import (
    T0,
    TARGET,
    make_runtime,
    setting_msg,
    source_msg,
    subscription_msg,
)

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
        await repo.units_upsert(conn, [unit_msg()], T0)
        await projections.settings_upsert(conn, [setting_msg(setting)], T0)
        for i, s in enumerate(sources):
            await projections.sources_upsert(conn, [source_msg(s)], T0 + timedelta(seconds=i))
    return setting, sources


def reconciliation(runtime: Runtime, planner: Planner, **config: Any) -> Reconciliation:
    cfg = ReconcileConfig(units=(BU,), batch_size=2, settle=timedelta(0), **config)
    return Reconciliation(runtime, planner, cfg)


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
    result = await reconciliation(runtime, inputs.planner).run_once(AS_OF)
    assert (result.sources, result.batches) == (5, 3)
    assert (await by_status(pool)) == {
        "Pending": {key(setting, s, o) for s in sources for o in (30, 7)}
    }
    again = await reconciliation(runtime, inputs.planner).run_once(AS_OF)
    assert again.sources == 0  # nothing changed since the watermark


async def test_interrupted_batch_keeps_the_watermark_and_the_rerun_converges(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    setting, sources = await missed(pool, 5)
    planner = Inputs(runtime).planner
    planner.for_sources = FailOnCall(planner, 2)  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="injected"):
        await reconciliation(runtime, planner).run_once(AS_OF)
    async with transaction(pool) as conn:
        mark = await repo.watermark_get(conn, SOURCES_PROVIDER)
    # The first batch committed (sources 0-1); the second rolled back with its watermark.
    assert mark is not None and mark.cursor_guid == sources[1]
    assert mark.watermark == T0 + timedelta(seconds=1)
    assert set(await rows(pool)) == {key(setting, s, o) for s in sources[:2] for o in (30, 7)}
    rerun = Inputs(runtime).planner
    result = await reconciliation(runtime, rerun).run_once(AS_OF)
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
        reconciliation(runtime, inputs.planner).run_once(AS_OF),
        reconciliation(runtime, Inputs(runtime).planner).run_once(AS_OF),
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
        await repo.units_upsert(conn, [unit_msg(bu=other_bu)], T0)
        await projections.settings_upsert(
            conn, [setting_msg(uuid.uuid4(), business_unit_id=other_bu)], T0
        )
        await projections.sources_upsert(
            conn, [source_msg(uuid.uuid4(), business_unit_id=other_bu)], T0
        )
    planner = Inputs(runtime).planner
    # Window of 10 days: the offset-7 row (Dec 24) is beyond it, the offset-30 one (Dec 1) in.
    result = await reconciliation(runtime, planner, window_days=10).run_once(AS_OF)
    assert result.sources == 1
    assert set(await rows(pool)) == {key(setting, source, 30)}
    # An empty allowlist reconciles nothing.
    off = Reconciliation(runtime, planner, ReconcileConfig(units=()))
    assert (await off.run_once(AS_OF)).batches == 0


async def test_reconciliation_statement_is_bounded(pool: asyncpg.Pool) -> None:
    statement = sql("automation_reconcile_sources_page")
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
        await repo.units_upsert(conn, [unit_msg()], T0)
        await projections.subscriptions_upsert(conn, [subscription_msg(sub)], T0)
    planner = Inputs(runtime).planner
    first = await reconciliation(runtime, planner).run_once(AS_OF)
    assert (first.subscriptions, len(await rows(pool))) == (1, 7)
    # A day later the window has moved one period on: one more row, the same keys before.
    before = set(await rows(pool))
    await reconciliation(runtime, planner).run_once(AS_OF + timedelta(days=1))
    after = set(await rows(pool))
    assert before < after and len(after - before) == 1
