"""The Recurring trigger on real PostgreSQL: a yearly work anniversary from the source event
to the dispatch request, one key per occurrence, the successor ensured at completion, and
revalidation of an occurrence the source no longer has."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from devkit.harness.automation import (
    make_runtime,
    outbox,
    runner,
    setting_msg,
    source_msg,
)
from devkit.harness.automation_inputs import Inputs, by_status, rows, unit_msg
from streams.contracts.automation import DispatchRequested, TriggerType
from streams.runtime import Runtime
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url, T0)
    yield rt
    await rt.close()


def anniversary(setting: uuid.UUID, **changes: Any) -> Any:
    return setting_msg(
        setting,
        trigger_type=TriggerType.RECURRING,
        trigger_key="HireDate",
        offsets_days=[7],
        **changes,
    )


def employee(source: uuid.UUID, hired: str = "2019-12-08", **changes: Any) -> Any:
    return source_msg(source, attributes={"HireDate": hired}, **changes)


def key(setting: uuid.UUID, source: uuid.UUID, occurrence: str) -> str:
    return f"reminder:{setting}:Doc:{source}:HireDate:{occurrence}:7"


async def test_a_yearly_anniversary_is_dispatched_and_its_successor_ensured(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    inputs = Inputs(runtime)
    setting, source = uuid.uuid4(), uuid.uuid4()
    await inputs.send(unit_msg(), anniversary(setting), employee(source))
    this_year, next_year = key(setting, source, "2026-12-08"), key(setting, source, "2027-12-08")
    found = await rows(pool)
    assert set(found) == {this_year}
    r = found[this_year]
    assert (r["trigger_type_id"], r["status_id"], r["scheduled_on"]) == ("Recurring", "Pending", T0)
    # Replaying the same source state, or a new Version of the same state, changes nothing.
    await inputs.send(employee(source))
    await inputs.send(employee(source, version=2))
    assert (await rows(pool))[this_year]["version"] == r["version"]

    result = await runner(runtime).run_once(RunContext.at(T0, clock=runtime.clock))
    assert (result.completed, result.failed, result.held) == (1, 0, 0)
    [e] = await outbox(pool)
    msg = DispatchRequested.model_validate_json(e["payload"], by_alias=True, by_name=False)
    assert (msg.scheduler_key, msg.trigger_type) == (this_year, TriggerType.RECURRING)
    # The chain goes on without a source event: next year's occurrence is Pending.
    status = await by_status(pool)
    assert status == {"Completed": {this_year}, "Pending": {next_year}}
    successor = (await rows(pool))[next_year]
    assert successor["scheduled_on"] == datetime(2027, 12, 1, 9, 0, tzinfo=UTC)
    # The event path yields the same key for it (and the Completed one is never re-sent).
    await inputs.send(employee(source, version=3))
    assert await by_status(pool) == status
    assert (await rows(pool))[next_year]["version"] == successor["version"]
    assert (
        await runner(runtime).run_once(RunContext.at(T0 + timedelta(days=1), clock=runtime.clock))
    ).claimed == 0


async def test_a_moved_anchor_deactivates_the_old_occurrence_and_ensures_the_new_one(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    inputs = Inputs(runtime)
    setting, source = uuid.uuid4(), uuid.uuid4()
    await inputs.send(unit_msg(), anniversary(setting), employee(source))
    await inputs.send(employee(source, hired="2019-12-20", version=2))
    status = await by_status(pool)
    assert status == {
        "Deactivated": {key(setting, source, "2026-12-08")},
        "Pending": {key(setting, source, "2026-12-20")},
    }
    old = (await rows(pool))[key(setting, source, "2026-12-08")]
    assert old["status_reason_code"] == "SourceNoLongerValid"


async def test_execution_deactivates_an_occurrence_the_source_no_longer_has(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    inputs = Inputs(runtime)
    setting, source = uuid.uuid4(), uuid.uuid4()
    await inputs.send(unit_msg(), anniversary(setting), employee(source))
    # The projection moves on without the planner (its event is still on the way).
    await pool.execute(
        'UPDATE automation.sources SET attributes = \'{"HireDate": "2019-06-01"}\'::jsonb '
        "WHERE source_guid = $1",
        source,
    )
    result = await runner(runtime).run_once(RunContext.at(T0, clock=runtime.clock))
    assert (result.completed, result.deactivated) == (0, {"SourceNoLongerValid": 1})
    assert await outbox(pool) == []
    assert await by_status(pool) == {"Deactivated": {key(setting, source, "2026-12-08")}}
