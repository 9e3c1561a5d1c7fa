"""Recipients, template and channels are resolved at execution (seed 003:
IReminderRecipientProvider / IReminderDeliveryPolicy), on real PostgreSQL and Kafka: a
template or delivery change leaves the Pending row as it is, and the dispatch request carries
what the providers resolve when the row is due."""

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
from devkit.harness.automation_inputs import Inputs, rows, unit_msg
from devkit.harness.automation_kafka import PARTITIONS, read_topic, relay_all
from devkit.kafka import create_topics
from streams.clock import ManualClock
from streams.contracts import DISPATCH_REQUESTED
from streams.contracts.automation import DeliveryChannel, DispatchRequested
from streams.metrics import Metrics
from streams.runtime import Runtime
from streams.settings import Settings
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

OWNER, NEW_OWNER, MANAGER = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
OLD_TEMPLATE, NEW_TEMPLATE = uuid.uuid4(), uuid.uuid4()
# What Ensure and the claim look at, and what support sees of a row.
ROW_FIELDS = (
    "scheduler_id",
    "status_id",
    "version",
    "updated_on",
    "input_hash",
    "scheduled_on",
    "scheduled_local_date",
    "time_zone_id",
    "dispatch_result_json",
    "conflict_input_hash",
    "is_on_support_hold",
)


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    yield rt
    await rt.close()


def snapshot(found: dict[str, asyncpg.Record]) -> dict[str, tuple[Any, ...]]:
    return {k: tuple(r[f] for f in ROW_FIELDS) for k, r in found.items()}


async def ensured_then_changed(inputs: Inputs, pool: asyncpg.Pool) -> str:
    """Rows ensured under the old template/channels/recipients, then all three changed on
    the setting and the recipient changed on the source; returns the 30-day key (due at T0)."""
    setting, source = uuid.uuid4(), uuid.uuid4()
    attributes = {"ExpiresOn": TARGET.isoformat(), "OwnerUserId": str(OWNER)}
    await inputs.send(
        unit_msg(),
        setting_msg(
            setting,
            template_id=OLD_TEMPLATE,
            delivery_channels=[DeliveryChannel.EMAIL],
            recipient_attributes=["OwnerUserId"],
        ),
        source_msg(source, attributes=attributes),
    )
    before = snapshot(await rows(pool))
    assert len(before) == 2 and {r[1] for r in before.values()} == {"Pending"}
    applied = await inputs.send(
        setting_msg(
            setting,
            version=2,
            template_id=NEW_TEMPLATE,
            delivery_channels=[DeliveryChannel.SMS, DeliveryChannel.PUSH],
            recipient_attributes=["OwnerUserId", "ManagerUserId"],
        )
    )
    assert applied.applied == 1  # the projection took the new Version
    applied = await inputs.send(
        source_msg(
            source,
            version=2,
            attributes=attributes | {"OwnerUserId": str(NEW_OWNER), "ManagerUserId": str(MANAGER)},
        )
    )
    assert applied.applied == 1
    # Nothing about the rows changed: same id, Version, schedule, hash; not on hold.
    assert snapshot(await rows(pool)) == before
    return f"reminder:{setting}:Doc:{source}:ExpiresOn:{TARGET.isoformat()}:30"


def assert_new_resolution(msg: DispatchRequested) -> None:
    assert msg.template_id == NEW_TEMPLATE
    assert msg.delivery_channels == [DeliveryChannel.SMS, DeliveryChannel.PUSH]
    assert msg.recipient_user_ids == [NEW_OWNER, MANAGER]


async def test_a_template_or_delivery_change_leaves_pending_rows_and_the_dispatch_carries_it(
    pool: asyncpg.Pool, runtime: Runtime
) -> None:
    key = await ensured_then_changed(Inputs(runtime), pool)
    result = await runner(runtime).run_once(RunContext.at(T0, clock=runtime.clock))
    assert (result.completed, result.held, result.failed) == (1, 0, 0)
    [e] = await outbox(pool)
    assert e["key"] == key
    msg = DispatchRequested.model_validate_json(e["payload"], by_alias=True, by_name=False)
    assert_new_resolution(msg)
    # The row keeps coordinates only: no recipient, template or channel is stored in it.
    r = (await rows(pool))[key]
    assert set(r["dispatch_result_json"]) == {"Topic", "Key", "RequestedAt", "Attempt", "RunId"}


async def test_the_dispatch_request_on_the_topic_carries_what_execution_resolved(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    runtime = Runtime(
        Settings(database_url=database_url, topic_prefix=topic_prefix, db_pool_max_size=4),
        metrics=Metrics(),
        clock=ManualClock(T0),
    )
    topic = f"{topic_prefix}{DISPATCH_REQUESTED.name}"
    await create_topics(kafka_bootstrap, [topic], partitions=PARTITIONS)
    try:
        key = await ensured_then_changed(Inputs(runtime), pool)
        assert (
            await runner(runtime).run_once(
                RunContext.at(T0 + timedelta(seconds=1), clock=runtime.clock)
            )
        ).completed == 1
    finally:
        await runtime.close()
    await relay_all(database_url, kafka_bootstrap, pool)
    [record] = await read_topic(kafka_bootstrap, topic)
    assert record.key == key.encode()
    assert record.value is not None
    msg = DispatchRequested.model_validate_json(record.value, by_alias=True, by_name=False)
    assert msg.scheduler_key == key
    assert_new_resolution(msg)
