"""A reminder setting over a business unit of 100,000 sources, as another team sees it: its
messages written with a plain aiokafka producer in the published wire form, one real worker
process, PostgreSQL read only to observe. Every scheduler row is planned (two offsets: two
rows per source), and meanwhile settings of other keys on the same partition keep flowing:
the partition's lag, the other keys' latency and the longest open transaction are printed
over time (run with -s). Minutes long: marker ``fanout_large``; FANOUT_E2E_SOURCES sets the
size.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from db.connector import create_pool
from devkit.harness.automation_workers import topics, wait_until
from devkit.workers import WorkerProcess, worker_env

pytestmark = [pytest.mark.e2e, pytest.mark.fanout_large, pytest.mark.timeout(1800)]

SOURCES = int(os.environ.get("FANOUT_E2E_SOURCES", "100000"))
# FANOUT_E2E_CHUNK_SOURCES=100000 makes the whole fan-out one transaction, as it was; the
# test then gives up after FANOUT_E2E_GIVE_UP_SECONDS.
CHUNK = os.environ.get("FANOUT_E2E_CHUNK_SOURCES")
GIVE_UP = float(os.environ.get("FANOUT_E2E_GIVE_UP_SECONDS", "1500"))
PARTITION = 0
# Bounds a chunked fan-out keeps with room to spare (a chunk of 1000 sources took 1.5 s):
# the longest open transaction seen, and the settings partition's lag (other keys come at
# 2 a second).
MAX_TRANSACTION_SECONDS = 15.0
MAX_LAG = 50
SETTINGS_TOPIC = "pin.automation.reminder-settings.v1"


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(database_url, min_size=1, max_size=4)
    try:
        yield p
    finally:
        await p.close()


def unit(bu: uuid.UUID) -> dict[str, Any]:
    return {"ContractVersion": 1, "Version": 1, "BusinessUnitId": str(bu), "TimeZoneId": "UTC"}


def source(bu: uuid.UUID, guid: uuid.UUID, expires: date) -> dict[str, Any]:
    return {
        "ContractVersion": 1,
        "Version": 1,
        "SourceType": "Doc",
        "SourceGuid": str(guid),
        "BusinessUnitId": str(bu),
        "OccurredAt": datetime.now(UTC).isoformat(),
        "IsActive": True,
        "Attributes": {"ExpiresOn": expires.isoformat()},
    }


def setting(bu: uuid.UUID, guid: uuid.UUID, version: int = 1) -> dict[str, Any]:
    return {
        "ContractVersion": 1,
        "Version": version,
        "SettingGuid": str(guid),
        "BusinessUnitId": str(bu),
        "SourceType": "Doc",
        "TriggerType": "DateBased",
        "TriggerKey": "ExpiresOn",
        "OffsetsDays": [30, 7],
        "SendTimeLocal": "09:00:00",
        "Active": True,
    }


class Producer:
    """A plain aiokafka producer writing the wire form (JSON, keyed as the contract says)."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.prefix = prefix
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=20
        )

    async def send(
        self, topic: str, key: str, doc: dict[str, Any], partition: int | None = None
    ) -> asyncio.Future[Any]:
        return await self.producer.send(
            self.prefix + topic,
            key=key.encode(),
            value=json.dumps(doc).encode(),
            partition=partition,
        )


async def lag(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int:
    end = (await consumer.end_offsets([tp]))[tp]
    committed = await consumer.committed(tp)
    return end - (committed or 0)


async def longest_transaction(pool: asyncpg.Pool, database: str) -> float:
    value = await pool.fetchval(
        "SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)), 0) "
        "FROM pg_stat_activity WHERE datname = $1 AND xact_start IS NOT NULL "
        "AND pid <> pg_backend_pid() AND application_name <> ''",
        database,
    )
    return float(value)


async def test_a_setting_over_100000_sources_is_planned_while_the_partition_flows(
    database_url: str,
    pool: asyncpg.Pool,
    kafka_bootstrap: str,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    await topics(kafka_bootstrap, topic_prefix)
    chunk = {"AUTOMATION_FANOUT_CHUNK_SOURCES": CHUNK} if CHUNK else {}
    env = worker_env(database_url, kafka_bootstrap, topic_prefix, **chunk)
    worker = WorkerProcess(env, tmp_path, "w")
    producer = Producer(kafka_bootstrap, topic_prefix)
    app_id = f"{topic_prefix}reminders"
    lag_reader = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap, group_id=app_id, enable_auto_commit=False
    )
    tp = TopicPartition(topic_prefix + SETTINGS_TOPIC, PARTITION)
    database = await pool.fetchval("SELECT current_database()")
    big_bu, big_setting = uuid.uuid4(), uuid.uuid4()
    expires = datetime.now(UTC).date() + timedelta(days=90)
    try:
        worker.start()
        await producer.producer.start()
        await lag_reader.start()
        await worker.wait_ready()

        # The BU and its sources.
        started = time.monotonic()
        await producer.send("pin.automation.business-units.v1", str(big_bu), unit(big_bu))
        sent = []
        for _ in range(SOURCES):
            guid = uuid.uuid4()
            sent.append(
                await producer.send(
                    "pin.automation.source-events.v1",
                    f"Doc:{guid}",
                    source(big_bu, guid, expires),
                )
            )
        await asyncio.gather(*sent)
        await wait_until(pool, "SELECT count(*) FROM automation.sources", SOURCES, 900, [worker])
        print(f"\n{SOURCES} sources stored in {time.monotonic() - started:.1f}s")

        # Small BUs whose settings are the other keys (one source each, ready beforehand).
        others = [(uuid.uuid4(), uuid.uuid4()) for _ in range(400)]
        for bu, _ in others:
            await producer.send("pin.automation.business-units.v1", str(bu), unit(bu))
            guid = uuid.uuid4()
            await producer.send(
                "pin.automation.source-events.v1", f"Doc:{guid}", source(bu, guid, expires)
            )
        await producer.producer.flush()
        await wait_until(
            pool, "SELECT count(*) FROM automation.sources", SOURCES + len(others), 120, [worker]
        )

        # The setting change, then one other key's setting every 0.5 s on the same partition.
        begin = time.monotonic()
        await producer.send(
            SETTINGS_TOPIC, str(big_setting), setting(big_bu, big_setting), PARTITION
        )
        await producer.producer.flush()
        expected = 2 * SOURCES
        latencies: list[float] = []
        longest = 0.0
        samples: list[tuple[float, int, int, float]] = []
        pending: dict[uuid.UUID, float] = {}
        planned = 0
        i = 0
        last_print = 0.0
        while planned < expected or pending:
            now = time.monotonic() - begin
            assert now < GIVE_UP, f"the fan-out did not finish in {GIVE_UP:g}s"
            assert worker.proc is not None and worker.proc.poll() is None, worker.tail()
            if planned < expected and i < len(others) and now >= 0.5 * i:
                bu, guid = others[i]
                i += 1
                await producer.send(SETTINGS_TOPIC, str(guid), setting(bu, guid), PARTITION)
                await producer.producer.flush()
                pending[guid] = time.monotonic()
            for guid in list(pending):
                rows = await pool.fetchval(
                    "SELECT count(*) FROM automation.scheduler WHERE setting_guid = $1", guid
                )
                if rows == 2:
                    latencies.append(time.monotonic() - pending.pop(guid))
            planned = await pool.fetchval(
                "SELECT count(*) FROM automation.scheduler WHERE setting_guid = $1", big_setting
            )
            longest = max(longest, await longest_transaction(pool, database))
            if now - last_print >= 5 or planned >= expected:
                last_print = now
                behind = await lag(lag_reader, tp)
                samples.append((now, planned, behind, max(latencies[-5:], default=0.0)))
                print(
                    f"t={now:6.1f}s planned={planned:7d}/{expected} settings-partition lag="
                    f"{behind:3d} other keys applied={len(latencies):3d} "
                    f"(latest latency {samples[-1][3]:.2f}s) longest transaction={longest:.2f}s"
                )
            await asyncio.sleep(0.1)
        took = time.monotonic() - begin
        left = await pool.fetchval("SELECT count(*) FROM automation.fanout_progress")
        print(
            f"planned {expected} rows of {SOURCES} sources in {took:.1f}s; "
            f"{len(latencies)} other keys meanwhile, latency median "
            f"{sorted(latencies)[len(latencies) // 2]:.2f}s max {max(latencies):.2f}s; "
            f"longest transaction seen {longest:.2f}s; fan-outs left {left}"
        )
        assert left == 0
        assert (
            await pool.fetchval(
                "SELECT count(DISTINCT scheduler_key) FROM automation.scheduler "
                "WHERE setting_guid = $1 AND status_id = 'Pending'",
                big_setting,
            )
            == expected
        )
        # Other keys were applied while the fan-out ran, not after it; no transaction held the
        # fan-out whole and the partition's committed offset kept up. (As one transaction: a
        # 100 s transaction, lag up to 172, other keys' median latency 11 s.)
        assert len(latencies) >= 5 and sorted(latencies)[len(latencies) // 2] < took / 2
        assert longest < MAX_TRANSACTION_SECONDS
        assert max(s[2] for s in samples) <= MAX_LAG
    finally:
        await lag_reader.stop()
        await producer.producer.stop()
        worker.stop()
