"""Automation inputs end to end: BU, settings and source events produced on their topics with
a plain producer → worker processes ensure scheduler rows → exactly one dispatch-requested
message per SchedulerKey once the rows come due, with a worker SIGKILLed mid-run."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from db.connector import create_pool
from devkit.harness.automation_workers import topics, wait_until
from devkit.kafka import produce, read_to_end
from devkit.workers import WorkerProcess, worker_env
from streams.contracts import BUSINESS_UNITS, REMINDER_SETTINGS, SOURCE_EVENTS, TopicContract
from streams.contracts.automation import (
    BusinessUnitChanged,
    Comparator,
    FiringPolicy,
    ReminderSettingChanged,
    SourceEntityChanged,
    Threshold,
    TriggerType,
)
from streams.contracts.base import Contract
from streams.outbox.records import outbox_id_of

pytestmark = pytest.mark.e2e

DISPATCH = "pin.automation.dispatch-requested.v1"
BU = uuid.uuid4()


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


def sources(n: int, version: int = 1) -> list[SourceEntityChanged]:
    today = datetime.now(UTC).date().isoformat()
    return [
        SourceEntityChanged(
            source_type="Booking",
            source_guid=uuid.uuid4(),
            business_unit_id=BU,
            version=version,
            occurred_at=datetime.now(UTC),
            is_active=True,
            attributes={"ExpiresOn": today, "Booked": 95},
        )
        for _ in range(n)
    ]


async def test_source_events_become_one_dispatch_request_per_key_with_a_worker_killed(
    database_url: str,
    pool: asyncpg.Pool,
    kafka_bootstrap: str,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    await topics(kafka_bootstrap, topic_prefix)
    # DateBased rows due in ~20 s (today, offset 0, send time now + 20 s, BU in UTC);
    # ThresholdCondition rows due at once (met since the source state).
    send_at = (datetime.now(UTC) + timedelta(seconds=20)).time().replace(microsecond=0)
    date_setting = ReminderSettingChanged(
        setting_guid=uuid.uuid4(),
        business_unit_id=BU,
        source_type="Booking",
        trigger_type=TriggerType.DATE_BASED,
        trigger_key="ExpiresOn",
        offsets_days=[0],
        send_time_local=send_at,
        active=True,
        version=1,
    )
    threshold_setting = ReminderSettingChanged(
        setting_guid=uuid.uuid4(),
        business_unit_id=BU,
        source_type="Booking",
        trigger_type=TriggerType.THRESHOLD_CONDITION,
        trigger_key="Capacity",
        threshold=Threshold(
            metric_key="Booked",
            value=90,
            comparator=Comparator.GTE,
            firing_policy=FiringPolicy.FALSE_TO_TRUE,
        ),
        active=True,
        version=1,
    )
    wave1, wave2 = sources(150), sources(150)
    env = worker_env(
        database_url,
        kafka_bootstrap,
        topic_prefix,
        TIMER_AUTOMATION_SCHEDULER_INTERVAL_SECONDS="2",
        TIMER_AUTOMATION_SCHEDULER_MAX_DURATION_SECONDS="1",
    )
    victim = WorkerProcess(env, tmp_path, "victim")
    survivor = WorkerProcess(env, tmp_path, "survivor")
    try:
        for w in (victim, survivor):
            w.start()
        await asyncio.gather(victim.wait_ready(), survivor.wait_ready())
        # Sources first, then settings, then the BU: out of order on purpose.
        await send(kafka_bootstrap, topic_prefix, SOURCE_EVENTS, wave1)  # type: ignore[arg-type]
        await send(
            kafka_bootstrap,
            topic_prefix,
            REMINDER_SETTINGS,  # type: ignore[arg-type]
            [date_setting, threshold_setting],
        )
        await send(
            kafka_bootstrap,
            topic_prefix,
            BUSINESS_UNITS,  # type: ignore[arg-type]
            [BusinessUnitChanged(business_unit_id=BU, time_zone_id="UTC", version=1)],
        )
        await wait_until(
            pool,
            "SELECT count(*) > 0 FROM automation.scheduler WHERE status_id = 'Completed'",
            True,
            90,
            [victim, survivor],
        )
        assert victim.proc is not None
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(timeout=10)
        # Replays and the second wave go to the survivor once it owns every partition.
        await send(kafka_bootstrap, topic_prefix, SOURCE_EVENTS, wave1 + wave2)  # type: ignore[arg-type]
        expected = 2 * (len(wave1) + len(wave2))
        await wait_until(
            pool,
            "SELECT count(*) FROM automation.scheduler WHERE status_id = 'Completed'",
            expected,
            180,
            [survivor],
        )
        await wait_until(
            pool, "SELECT count(*) FROM ops.outbox WHERE published_at IS NULL", 0, 60, [survivor]
        )
    finally:
        for w in (victim, survivor):
            if w.proc is not None and w.proc.poll() is None:
                w.stop()
    completed = {
        r["scheduler_key"]
        for r in await pool.fetch(
            "SELECT scheduler_key FROM automation.scheduler WHERE status_id = 'Completed'"
        )
    }
    records = await read_to_end(kafka_bootstrap, topic_prefix + DISPATCH)
    keys = [r.key.decode() for r in records if r.key is not None]
    # One effect per key: a record seen twice is a re-publish of the same outbox record (same
    # outbox-id header) after the worker was killed, which at-least-once delivery allows.
    outbox_ids: dict[str, set[int | None]] = {}
    for r in records:
        if r.key is not None:
            outbox_ids.setdefault(r.key.decode(), set()).add(outbox_id_of(r.headers))
    assert len(outbox_ids) == expected, (len(keys), len(outbox_ids))
    assert all(len(ids) == 1 and None not in ids for ids in outbox_ids.values())
    assert set(keys) == completed
    assert sum(":threshold:Booked:90:FalseToTrue:rise-v1" in k for k in set(keys)) == expected // 2
    assert await pool.fetchval("SELECT count(*) FROM automation.scheduler") == expected
