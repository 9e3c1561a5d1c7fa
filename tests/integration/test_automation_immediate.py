"""Immediate notifications on real PostgreSQL and Kafka: a setting that asks for one gets a
dispatch request at once, through the same outbox, with its own key — once per source and
target date, whatever replays, replans and runs follow."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from devkit.harness.automation import (
    T0,
    TARGET,
    make_runtime,
    outbox,
    runner,
    setting_msg,
    source_msg,
)
from devkit.harness.automation_inputs import Inputs, by_status, rows, unit_msg
from devkit.harness.automation_kafka import PARTITIONS, read_topic, relay_all
from devkit.kafka import create_topics
from streams.clock import ManualClock
from streams.contracts import DISPATCH_REQUESTED
from streams.contracts.automation import DispatchRequested
from streams.metrics import Metrics
from streams.runtime import Runtime
from streams.settings import Settings
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    yield rt
    await rt.close()


def asking(setting: uuid.UUID, **changes: Any) -> Any:
    return setting_msg(setting, offsets_days=[7], immediate_notification=True, **changes)


def keys(
    setting: uuid.UUID, source: uuid.UUID, target: str = TARGET.isoformat()
) -> tuple[str, str]:
    base = f"reminder:{setting}:Doc:{source}:ExpiresOn:{target}"
    return f"{base}:immediate", f"{base}:7"


def dispatched(events: Any) -> list[DispatchRequested]:
    return [
        DispatchRequested.model_validate_json(e["payload"], by_alias=True, by_name=False)
        for e in events
    ]


async def test_a_setting_that_asks_gets_a_dispatch_request_at_once_and_only_once(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    inputs = Inputs(runtime)
    setting, source = uuid.uuid4(), uuid.uuid4()
    await inputs.send(unit_msg(), asking(setting), source_msg(source))
    immediate, scheduled = keys(setting, source)
    found = await rows(pool)
    assert set(found) == {immediate, scheduled}
    assert (found[immediate]["scheduled_on"], found[immediate]["trigger_type_id"]) == (
        T0,
        "DateBased",
    )
    # The runner is woken for it at once.
    assert min(c.scheduled_on for c in inputs.woken[-1].candidates) == T0

    result = await runner(runtime).run_once(RunContext.at(T0, clock=runtime.clock))
    assert result.completed == 1
    [msg] = dispatched(await outbox(pool))
    assert (msg.scheduler_key, msg.immediate) == (immediate, True)
    assert await by_status(pool) == {"Completed": {immediate}, "Pending": {scheduled}}

    # Replays, new Versions of the same state and a replan of the setting send nothing new.
    await inputs.send(source_msg(source))
    await inputs.send(source_msg(source, version=2))
    await inputs.send(asking(setting, version=2))
    assert (
        await runner(runtime).run_once(
            RunContext.at(T0 + timedelta(minutes=1), clock=runtime.clock)
        )
    ).claimed == 0
    assert len(await outbox(pool)) == 1

    # A new target date is a new occurrence: its own immediate notification.
    moved = (TARGET + timedelta(days=10)).isoformat()
    await inputs.send(source_msg(source, version=3, attributes={"ExpiresOn": moved}))
    new_immediate, new_scheduled = keys(setting, source, moved)
    assert (await by_status(pool))["Pending"] == {new_immediate, new_scheduled}
    assert (
        await runner(runtime).run_once(
            RunContext.at(T0 + timedelta(minutes=2), clock=runtime.clock)
        )
    ).completed == 1
    assert [m.scheduler_key for m in dispatched(await outbox(pool))] == [immediate, new_immediate]
    # The scheduled reminder is sent as a reminder, not as an immediate notification.
    await runner(runtime).run_once(RunContext.at(T0 + timedelta(days=40), clock=runtime.clock))
    last = dispatched(await outbox(pool))[-1]
    assert (last.scheduler_key, last.immediate) == (new_scheduled, False)


async def test_no_immediate_row_unless_asked_and_a_withdrawn_ask_deactivates_it(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    inputs = Inputs(runtime)
    plain, setting, source = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    await inputs.send(unit_msg(), setting_msg(plain, offsets_days=[7]), source_msg(source))
    assert set(await rows(pool)) == {keys(plain, source)[1]}
    await inputs.send(asking(setting))
    immediate, _ = keys(setting, source)
    assert immediate in await rows(pool)
    # Withdrawn before the runner got to it: deactivated, never sent.
    await inputs.send(setting_msg(setting, offsets_days=[7], version=2))
    r = (await rows(pool))[immediate]
    assert (r["status_id"], r["status_reason_code"]) == ("Deactivated", "ReminderSettingInactive")
    assert (await runner(runtime).run_once(RunContext.at(T0, clock=runtime.clock))).completed == 0
    assert await outbox(pool) == []


async def test_the_immediate_dispatch_request_reaches_the_topic(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    runtime = Runtime(
        Settings(database_url=database_url, topic_prefix=topic_prefix, db_pool_max_size=4),
        metrics=Metrics(),
        clock=ManualClock(T0),
    )
    topic = f"{topic_prefix}{DISPATCH_REQUESTED.name}"
    await create_topics(kafka_bootstrap, [topic], partitions=PARTITIONS)
    setting, source = uuid.uuid4(), uuid.uuid4()
    try:
        await Inputs(runtime).send(unit_msg(), asking(setting), source_msg(source))
        assert (
            await runner(runtime).run_once(RunContext.at(T0, clock=runtime.clock))
        ).completed == 1
    finally:
        await runtime.close()
    await relay_all(database_url, kafka_bootstrap, pool)
    [record] = await read_topic(kafka_bootstrap, topic)
    immediate, _ = keys(setting, source)
    assert record.key == immediate.encode() and record.value is not None
    msg = DispatchRequested.model_validate_json(record.value, by_alias=True, by_name=False)
    assert (msg.scheduler_key, msg.immediate, msg.setting_guid) == (immediate, True, setting)
