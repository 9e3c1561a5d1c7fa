"""Immediate notifications end to end: a worker process, a setting that asks for them and
source events produced with a plain producer → one dispatch request per source on
pin.automation.dispatch-requested.v1 at once (the scheduler's 10-minute polling interval
is never reached: the ensure wakes it), carrying what execution resolved; the scheduled
reminders stay Pending."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from db.connector import create_pool
from devkit.harness.automation_workers import topics, wait_until
from devkit.kafka import consume, produce, read_to_end
from devkit.workers import WorkerProcess, worker_env
from streams.contracts import BUSINESS_UNITS, REMINDER_SETTINGS, SOURCE_EVENTS, TopicContract
from streams.contracts.automation import (
    BusinessUnitChanged,
    DeliveryChannel,
    DispatchRequested,
    ReminderSettingChanged,
    SourceEntityChanged,
    TriggerType,
)
from streams.contracts.base import Contract

pytestmark = pytest.mark.e2e

DISPATCH = "pin.automation.dispatch-requested.v1"
SOURCES = 50


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(database_url, min_size=1, max_size=4)
    try:
        yield p
    finally:
        await p.close()


async def send(
    bootstrap: str, prefix: str, contract: TopicContract[Contract], msgs: Sequence[Contract]
) -> None:
    records = [
        (contract.key(m), json.dumps(m.model_dump(mode="json", by_alias=True)).encode())
        for m in msgs
    ]
    await produce(bootstrap, prefix + contract.name, records)


async def test_a_setting_that_asks_gets_one_immediate_dispatch_per_source_at_once(
    database_url: str,
    pool: asyncpg.Pool,
    kafka_bootstrap: str,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    await topics(kafka_bootstrap, topic_prefix)
    bu, template = uuid.uuid4(), uuid.uuid4()
    target = (datetime.now(UTC) + timedelta(days=60)).date()
    setting = ReminderSettingChanged(
        setting_guid=uuid.uuid4(),
        business_unit_id=bu,
        source_type="Doc",
        trigger_type=TriggerType.DATE_BASED,
        trigger_key="ExpiresOn",
        offsets_days=[30],
        active=True,
        version=1,
        immediate_notification=True,
        template_id=template,
        delivery_channels=[DeliveryChannel.EMAIL],
        recipient_attributes=["OwnerUserId"],
    )
    owners = {uuid.uuid4(): uuid.uuid4() for _ in range(SOURCES)}  # source → owner
    sources = [
        SourceEntityChanged(
            source_type="Doc",
            source_guid=source,
            business_unit_id=bu,
            version=1,
            occurred_at=datetime.now(UTC),
            is_active=True,
            attributes={"ExpiresOn": target.isoformat(), "OwnerUserId": str(owner)},
        )
        for source, owner in owners.items()
    ]
    env = worker_env(
        database_url,
        kafka_bootstrap,
        topic_prefix,
        # Polling alone would take 10 minutes: only the wake-up after the ensure is fast.
        TIMER_AUTOMATION_SCHEDULER_INTERVAL_SECONDS="600",
    )
    worker = WorkerProcess(env, tmp_path, "worker")
    try:
        worker.start()
        await worker.wait_ready()
        await send(
            kafka_bootstrap,
            topic_prefix,
            BUSINESS_UNITS,  # type: ignore[arg-type]
            [BusinessUnitChanged(business_unit_id=bu, time_zone_id="UTC", version=1)],
        )
        await send(kafka_bootstrap, topic_prefix, REMINDER_SETTINGS, [setting])  # type: ignore[arg-type]
        sent = time.monotonic()
        await send(kafka_bootstrap, topic_prefix, SOURCE_EVENTS, sources)  # type: ignore[arg-type]
        arrived = await consume(kafka_bootstrap, topic_prefix + DISPATCH, count=SOURCES, timeout=60)
        took = time.monotonic() - sent
        await wait_until(
            pool, "SELECT count(*) FROM ops.outbox WHERE published_at IS NULL", 0, 60, [worker]
        )
    finally:
        worker.stop()
    print(f"\nimmediate dispatch: {SOURCES} sources -> {len(arrived)} on the topic in {took:.2f} s")
    records = await read_to_end(kafka_bootstrap, topic_prefix + DISPATCH)
    messages = [DispatchRequested.model_validate_json(r.value or b"") for r in records]
    assert len({m.scheduler_key for m in messages}) == SOURCES == len(messages)
    for m in messages:
        assert m.immediate and m.scheduler_key.endswith(f":{target.isoformat()}:immediate")
        assert m.source_guid is not None
        assert (m.template_id, m.delivery_channels) == (template, [DeliveryChannel.EMAIL])
        assert m.recipient_user_ids == [owners[m.source_guid]]
    pending = await pool.fetchval(
        "SELECT count(*) FROM automation.scheduler WHERE status_id = 'Pending' "
        "AND scheduler_key LIKE '%:30'"
    )
    assert pending == SOURCES  # the scheduled reminders wait for their day
