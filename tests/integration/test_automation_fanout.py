"""A setting's fan-out over a large (BU, SourceType) on real PostgreSQL: planned in chunks
with its position committed, resumed after a crash between chunks, superseded by a newer
Version, and the same rows in the end as one transaction over every source plans.

Each scenario runs twice on one database: on a BU whose planner takes every source in one
chunk (what one transaction did) and on a twin BU (same sources, same steps) whose planner
takes ``CHUNK`` sources per transaction; the rows of the two are compared with the GUIDs
replaced by their place in the scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from db import fanout_progress as progress_repo
from db.connector import DatabaseUnavailable, transaction
from devkit.harness.automation import TARGET, make_runtime, setting_msg, source_msg
from devkit.harness.automation_inputs import Inputs, complete, unit_msg
from streams import faults
from streams.contracts.automation import SourceEntityChanged
from streams.input.consumer import Decoded
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.automation import fanout as fanout_module
from streams.slices.automation.cli import add_commands, run_automation
from streams.slices.automation.fanout import FanOutDrainer
from streams.slices.automation.metrics import AutomationMetrics
from streams.slices.automation.planner import Planner
from streams.slices.automation.support import status_section
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

N = 57  # sources of the BU: 6 chunks of 10
CHUNK = 10


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    yield rt
    await rt.close()


@dataclass
class Twin:
    """One BU of a scenario: its planner's chunk size, its setting and sources."""

    inputs: Inputs
    bu: uuid.UUID = field(default_factory=uuid.uuid4)
    setting: uuid.UUID = field(default_factory=uuid.uuid4)
    sources: list[uuid.UUID] = field(default_factory=lambda: [uuid.uuid4() for _ in range(N)])

    @property
    def planner(self) -> Planner:
        return self.inputs.planner

    def names(self) -> dict[str, str]:
        out = {str(self.setting): "SETTING"}
        out.update({str(g): f"source{i:03d}" for i, g in enumerate(self.sources)})
        return out

    async def send(self, *messages: Any) -> None:
        await self.inputs.send(*messages)

    async def start(self) -> None:
        await self.send(unit_msg(bu=self.bu))
        # Targets spread over two months (some rows due past the others' horizon).
        sources = [
            source_msg(
                g,
                business_unit_id=self.bu,
                attributes={"ExpiresOn": (TARGET + timedelta(days=i)).isoformat()},
            )
            for i, g in enumerate(self.sources)
        ]
        await self.inputs.appliers[SourceEntityChanged]([Decoded(None, m) for m in sources])  # type: ignore[arg-type]

    def setting_msg(self, version: int, offsets: list[int]) -> Any:
        return setting_msg(
            self.setting, business_unit_id=self.bu, offsets_days=offsets, version=version
        )

    def source_off(self, i: int) -> Any:
        return source_msg(
            self.sources[i],
            business_unit_id=self.bu,
            is_active=False,
            version=2,
            attributes={"ExpiresOn": (TARGET + timedelta(days=i)).isoformat()},
        )

    def key(self, i: int, offset: int) -> str:
        target = (TARGET + timedelta(days=i)).isoformat()
        return f"reminder:{self.setting}:Doc:{self.sources[i]}:ExpiresOn:{target}:{offset}"


def twins(runtime: Runtime) -> tuple[Twin, Twin]:
    whole, chunked = Inputs(runtime), Inputs(runtime)
    whole.planner.chunk_sources = 1_000_000
    chunked.planner.chunk_sources = CHUNK
    return Twin(whole), Twin(chunked)


async def outcome(pool: asyncpg.Pool, twin: Twin) -> set[tuple[Any, ...]]:
    """The twin's rows, GUIDs named by their place: key, status, reason, due, Version."""
    found = await pool.fetch(
        "SELECT scheduler_key, status_id, status_reason_code, scheduled_on, version "
        "FROM automation.scheduler WHERE setting_guid = $1",
        twin.setting,
    )
    names = twin.names()
    out = set()
    for r in found:
        key = r["scheduler_key"]
        for guid, name in names.items():
            key = key.replace(guid, name)
        out.add((key, r["status_id"], r["status_reason_code"], r["scheduled_on"], r["version"]))
    return out


async def progress(runtime: Runtime, twin: Twin) -> progress_repo.Progress | None:
    pool = await runtime.pool()
    async with transaction(pool) as conn:
        found = await progress_repo.get(conn, [twin.setting])
    return found[0] if found else None


def drainer(runtime: Runtime, twin: Twin, park_after: int = 5) -> FanOutDrainer:
    return FanOutDrainer(runtime, twin.planner, park_after=park_after)


async def drain(runtime: Runtime, twin: Twin) -> int:
    result = await drainer(runtime, twin).run_once(
        RunContext.at(runtime.clock.now(), clock=runtime.clock)
    )
    return result.chunks


class Crash(BaseException):
    """A worker dying between two chunks (nothing in the drainer catches it)."""


async def test_chunked_fanout_plans_the_rows_one_transaction_plans_and_resumes_after_a_crash(
    runtime: Runtime, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole, chunked = twins(runtime)
    for twin in (whole, chunked):
        await twin.start()
        await twin.send(twin.setting_msg(1, [30, 7]))
    # The input's transaction planned one chunk; the drainer plans the other five.
    first = await progress(runtime, chunked)
    assert first is not None and first.after_guid == sorted(chunked.sources)[CHUNK - 1]
    assert await progress(runtime, whole) is None
    assert await drain(runtime, chunked) == 5
    assert await progress(runtime, chunked) is None
    assert await outcome(pool, chunked) == await outcome(pool, whole)
    assert len(await outcome(pool, whole)) == 2 * N

    # History, a source gone, then a new offset: 7 → 14 for every source.
    for twin in (whole, chunked):
        await complete(pool, twin.key(3, 30))
        await complete(pool, twin.key(33, 7))
        await twin.send(twin.source_off(5))
        await twin.send(twin.setting_msg(2, [30, 14]))
    rows_after_input = await outcome(pool, chunked)
    pending_14 = {k for k, s, *_ in rows_after_input if k.endswith(":14") and s == "Pending"}
    assert len(pending_14) == CHUNK  # one chunk of active sources so far

    # The worker dies right after the drainer's first chunk committed.
    real_hit = faults.hit
    crashes = []

    def hit(point: str) -> None:
        if point == "automation_fanout.after_chunk" and not crashes:
            crashes.append(point)
            raise Crash
        real_hit(point)

    monkeypatch.setattr(fanout_module.faults, "hit", hit)
    with pytest.raises(Crash):
        await drain(runtime, chunked)
    saved = await progress(runtime, chunked)
    assert saved is not None and saved.chunks == 2  # the input's chunk and the drainer's
    active = sorted(g for i, g in enumerate(chunked.sources) if i != 5)
    assert saved.after_guid == active[2 * CHUNK - 1]
    # A new worker resumes at the saved position: four chunks left, none done twice.
    assert await drain(runtime, chunked) == 4
    assert await progress(runtime, chunked) is None
    assert await outcome(pool, chunked) == await outcome(pool, whole)


async def test_a_newer_version_supersedes_an_unfinished_fanout_and_a_zone_change_fans_out(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    whole, chunked = twins(runtime)
    for twin in (whole, chunked):
        await twin.start()
        await twin.send(twin.setting_msg(1, [30, 7]))
    await drain(runtime, chunked)
    for twin in (whole, chunked):
        await twin.send(twin.setting_msg(2, [30, 14]))
    assert (await progress(runtime, chunked)).setting_version == 2  # type: ignore[union-attr]
    # Before the drainer gets to it, a newer Version: its fan-out starts again from the
    # first source (its first chunk in its input's transaction), replanning what v2 did.
    for twin in (whole, chunked):
        await twin.send(twin.setting_msg(3, [21, 1]))
    newer = await progress(runtime, chunked)
    assert newer is not None and newer.setting_version == 3 and newer.chunks == 1
    assert await drain(runtime, chunked) == 5
    rows, reference = await outcome(pool, chunked), await outcome(pool, whole)
    # Superseded: v2's rows past its first chunk were never made; one transaction made them
    # and v3 deactivated them at once. Every other row is the same, open ones included.
    assert rows < reference
    skipped = reference - rows
    assert len(skipped) == N - CHUNK  # v2 planned one chunk of sources
    assert all(k.endswith(":14") and s == "Deactivated" for k, s, *_ in skipped)

    # The BU's time zone: every setting of the BU fans out over its sources again.
    for twin in (whole, chunked):
        await twin.send(unit_msg("Asia/Ho_Chi_Minh", version=2, bu=twin.bu))
    assert await progress(runtime, chunked) is not None
    assert await drain(runtime, chunked) == 5
    rows, reference = await outcome(pool, chunked), await outcome(pool, whole)
    assert reference - rows == skipped and rows < reference
    moved = {r for r in rows if r[1] == "Pending"}
    assert moved and all(r[3].hour == 2 for r in moved)  # 09:00 in Ho Chi Minh City


def cli(settings: Settings, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="group"))
    args = parser.parse_args(argv)
    assert run_automation(settings, args) == 0
    return capsys.readouterr().out


async def test_a_chunk_that_fails_the_same_way_is_parked_with_its_reason_and_others_finish(
    runtime: Runtime,
    pool: asyncpg.Pool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, chunked = twins(runtime)
    other = Twin(chunked.inputs)
    for twin in (chunked, other):
        await twin.start()
        await twin.send(twin.setting_msg(1, [30, 7]))
    real_chunk = Planner.setting_chunk

    async def setting_chunk(self: Planner, conn: Any, p: Any, *args: Any) -> Any:
        if p.setting_guid == chunked.setting:
            # As a statement cancelled by statement_timeout on this input every time.
            raise DatabaseUnavailable("QueryCanceledError [57014]", "57014")
        return await real_chunk(self, conn, p, *args)

    monkeypatch.setattr(Planner, "setting_chunk", setting_chunk)
    worker = drainer(runtime, chunked, park_after=3)
    results = []
    for _ in range(4):  # a failing fan-out waits for the next run
        results.append(
            await worker.run_once(RunContext.at(runtime.clock.now(), clock=runtime.clock))
        )
    assert [r.failed for r in results] == [1, 1, 1, 0]
    assert [r.parked for r in results] == [0, 0, 1, 0]
    assert results[0].chunks == 5 and await progress(runtime, other) is None  # the other finished
    parked = await progress(runtime, chunked)
    assert parked is not None and parked.parked_on is not None and parked.failures == 3
    assert parked.last_error == "DatabaseUnavailable [57014]: QueryCanceledError [57014]"
    assert parked.after_guid == sorted(chunked.sources)[CHUNK - 1]  # where it stopped
    status = await status_section(runtime, runtime.metrics.family(AutomationMetrics))()
    assert (status["fanouts_in_progress"], status["fanouts_parked"]) == (0, 1)
    # Listed and released by an operator, it goes on from there.
    monkeypatch.setattr(Planner, "setting_chunk", real_chunk)
    settings = Settings(database_url=runtime.settings.database_url)
    listed = await asyncio.to_thread(cli, settings, ["automation", "fanouts"], capsys)
    assert f"parked {chunked.setting} chunks=1 failures=3" in listed
    assert "reason=DatabaseUnavailable [57014]: QueryCanceledError [57014]" in listed
    assert "0 fan-out(s) in progress, 1 parked" in listed
    released = await asyncio.to_thread(
        cli, settings, ["automation", "fanout-release", str(chunked.setting)], capsys
    )
    assert released.strip() == f"released    {chunked.setting}"
    assert await drain(runtime, chunked) == 5
    assert len(await outcome(pool, chunked)) == 2 * N


async def test_small_fanouts_share_the_input_transaction_and_the_drainers(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    """30 settings of 30 BUs of 3 sources each in one batch: the input's transaction plans
    what fits in one chunk's budget, the drainer the rest, several fan-outs a transaction."""
    inputs = Inputs(runtime)
    inputs.planner.chunk_sources = CHUNK
    twins = [Twin(inputs, sources=[uuid.uuid4() for _ in range(3)]) for _ in range(30)]
    for twin in twins:
        await twin.start()
    settings = [Decoded(None, twin.setting_msg(1, [30, 7])) for twin in twins]
    await inputs.appliers[type(settings[0].message)](settings)
    pool_ = await runtime.pool()
    async with transaction(pool_) as conn:
        left = await progress_repo.get(conn, [t.setting for t in twins])
    assert len(left) == 30 - 3  # 3 + 3 + 3 sources finished, the fourth got one
    result = await drainer(runtime, twins[0]).run_once(
        RunContext.at(runtime.clock.now(), clock=runtime.clock)
    )
    # 80 sources left, 10 a transaction (a chunk ending exactly at its limit needs one more,
    # empty, to know it is the last): about 9 transactions for 27 fan-outs, not 27.
    assert result.chunks >= 27 and result.transactions <= 12
    async with transaction(pool_) as conn:
        assert await progress_repo.get(conn, [t.setting for t in twins]) == []
    for twin in twins:
        assert len(await outcome(pool, twin)) == 6
