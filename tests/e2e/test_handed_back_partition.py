"""A partition that a rebalance takes away and later hands back must not read as stalled.

The fault matrix's CI run ended on ``stalled_partitions automation-source-events
...source-events.v1:1 lag=3 for=385s``: the worker had handled that partition, a rebalance
(another member joining) gave it to someone else, who handled the last records and
committed them, and a later rebalance (that member leaving) handed it back. No record came
after that, so nothing in the worker moved its stall check's position past what it had
reached before it lost the partition: lag forever, /health not ready for good.

Two real workers on the shared stack, as the matrix does it: A alone handles a record on
every partition; B joins and handles the next record on the partitions it got (A gets
records on its own partitions meanwhile, as in the matrix); B stops and A gets every
partition back. No record comes after that; A must stay ready through more than its
stall limit.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from devkit.messages.factories import calendar_event, encode
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

EVENTS = "pin.calendar.events.v1"
PARTITIONS = 4
STALL_SECONDS = 3


def event_ids_per_partition() -> list[str]:
    """One event id whose key lands on each partition (Kafka's default partitioner)."""
    parts = list(range(PARTITIONS))
    found: dict[int, str] = {}
    while len(found) < PARTITIONS:
        event_id = str(uuid.uuid4())
        found.setdefault(int(DefaultPartitioner()(event_id.encode(), parts, parts)), event_id)
    return [found[p] for p in parts]


@pytest.fixture
def pair(
    module_database_url: str, kafka_bootstrap: str, module_topic_prefix: str, module_tmp: Path
) -> Iterator[tuple[WorkerProcess, WorkerProcess, dict[str, Any]]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=module_topic_prefix)
    asyncio.run(ensure_topics(settings, contract_topic_names(settings)))
    env = worker_env(
        module_database_url,
        kafka_bootstrap,
        module_topic_prefix,
        STREAM_STALL_SECONDS=str(STALL_SECONDS),
        BROKER_SESSION_TIMEOUT="10",
        BROKER_HEARTBEAT_INTERVAL="1",
    )
    a = WorkerProcess({**env, "BROKER_CLIENT_ID": "handback-a"}, module_tmp, "handback-a")
    b = WorkerProcess({**env, "BROKER_CLIENT_ID": "handback-b"}, module_tmp, "handback-b")
    try:
        yield a, b, {"db": module_database_url, "kafka": kafka_bootstrap}
    finally:
        for w in (a, b):
            w.stop()


async def send_versions(kafka: str, topic: str, event_ids: list[str], version: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka, acks="all")
    await producer.start()
    try:
        for event_id in event_ids:
            msg = calendar_event(EventId=event_id, Version=version)
            await producer.send_and_wait(topic, encode(msg), key=event_id.encode())
    finally:
        await producer.stop()


async def applied(db: str, event_ids: list[str], version: int) -> bool:
    conn = await asyncpg.connect(db)
    try:
        n = await conn.fetchval(
            "SELECT count(*) FROM calendar.events WHERE event_id = ANY($1::uuid[]) "
            "AND version >= $2",
            event_ids,
            version,
        )
        return bool(n == len(event_ids))
    finally:
        await conn.close()


@pytest.mark.timeout(420)  # two worker starts (up to 120 s each on a busy machine) + the rest
async def test_a_partition_handed_back_by_a_rebalance_is_not_a_stall(
    pair: tuple[WorkerProcess, WorkerProcess, dict[str, Any]], module_topic_prefix: str
) -> None:
    a, b, ctx = pair
    topic = module_topic_prefix + EVENTS
    events = event_ids_per_partition()
    a.start()
    alone = await a.wait_ready(timeout=120)
    everything = alone["assigned_partitions"]
    await send_versions(ctx["kafka"], topic, events, 1)
    await eventually(lambda: applied(ctx["db"], events, 1), timeout=60, what="A applied version 1")

    # B joins: the group splits the partitions. A's /health is not asked meanwhile (its
    # stall check is what runs on /health, as a probe would not run in between either).
    b.start()
    await b.wait_ready(timeout=120)
    await send_versions(ctx["kafka"], topic, events, 2)
    await eventually(lambda: applied(ctx["db"], events, 2), timeout=60, what="version 2 applied")
    _, status = await asyncio.to_thread(b.get, "/status?format=json")
    b_parts = [
        p["partition"]
        for agent in status["agents"]
        if agent["agent"] == "calendar-events"
        for p in agent["partitions"]
    ]
    assert b_parts, f"B got no calendar partition: {status['agents']}"
    assert b.stop() == 0  # leaves the group: its partitions go back to A

    async def everything_back() -> dict[str, Any] | None:
        _, health = await asyncio.to_thread(a.get, "/health")
        return health if health.get("assigned_partitions") == everything else None

    await eventually(everything_back, timeout=60, what="A holds every partition again")
    # Ready, and still ready once the stall limit has passed more than twice over with no
    # new record (a stale position would have lag and no movement: not ready for good).
    seen: list[tuple[int, Any]] = []
    until = time.monotonic() + 3 * STALL_SECONDS
    while time.monotonic() < until:
        seen.append(await asyncio.to_thread(a.get, "/health"))
        await asyncio.sleep(0.5)
    not_ready = [h for code, h in seen if code != 200]
    if not_ready:
        _, view = await asyncio.to_thread(a.get, "/status?format=json")
        mine = [
            {"partitions": agent["partitions"], "stalled": agent["stalled"]}
            for agent in view["agents"]
            if agent["agent"] == "calendar-events"
        ]
        raise AssertionError(
            f"A not ready after getting {b_parts} back: {not_ready[-1]['stalled_partitions']}; "
            f"its /status (committed, highwater): {mine}"
        )
