"""Relay: 200,000 outbox rows published to Kafka and marked published, by the real relay
(lanes, per-key order, parking checks, explain columns) against a bare loop doing the least
the same guarantee needs for a backlog that is all committed before it starts: in one
transaction, take one advisory lock (a single publisher; row locks would add WAL the relay
does not write), read the next rows by id after the last one sent (a keyset on the primary
key), send them with an idempotent acks=all producer, wait for every ack, mark them with
their partition and offset, commit. Both run in this process, one after the other, on copies
of the same rows; CPU per row (this process, PostgreSQL) and WAL per row beside each.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import asyncpg
from aiokafka import AIOKafkaProducer

from bench.common import KAFKA_BOOTSTRAP, admin, database, drop_topics
from bench.cpu import CpuMeter, PerEvent, per_event
from bench.report import Measure, measure
from streams.kafka_admin import ensure_topics
from streams.metrics import Metrics
from streams.outbox.config import RelayConfig
from streams.outbox.partitioner import kafka_partitioner
from streams.outbox.relay import OutboxRelay
from streams.settings import Settings

QUICK = {"rows": 5_000}
BATCH = 500  # the relay's default OUTBOX_BATCH_SIZE

# Rows shaped like the dispatcher's reminder-due records (about 420 bytes of payload).
SEED = """
INSERT INTO ops.outbox (topic, key, payload, headers)
SELECT $1, e.id::text,
       json_build_object('ContractVersion', 1, 'ReminderId', md5('r' || g)::uuid,
           'EventId', e.id, 'TenantId', md5('t' || (g % 97))::uuid,
           'OwnerUserId', md5('o' || (g % 5003))::uuid, 'ClientUserId', md5('c' || g)::uuid,
           'Kind', 'Appointment', 'StartAt', now() + interval '1 day', 'TimeZone',
           'Europe/Berlin', 'OffsetMinutes', 60, 'DueAt', now(), 'AppointmentId',
           md5('a' || g)::uuid, 'Version', 3),
       jsonb_build_object('correlation-id', 'bench-relay')
FROM generate_series(1, $2) AS g, LATERAL (SELECT md5('e' || (g / 2))::uuid AS id) AS e
"""

LOCK = "SELECT pg_advisory_xact_lock(7311)"

CLAIM = """
SELECT id, topic, key, payload::text AS payload, headers::text AS headers
FROM ops.outbox WHERE id > $2 AND published_at IS NULL ORDER BY id LIMIT $1
"""

MARK = """
UPDATE ops.outbox o
SET published_at = now(), published_partition = a.p, published_offset = a.o
FROM unnest($1::bigint[], $2::int[], $3::bigint[]) AS a(id, p, o)
WHERE o.id = a.id
"""


def bare_producer() -> AIOKafkaProducer:
    """The bare loop's producer: idempotent, acks=all, the relay's own partitioner (the
    reference hashes keys as cheaply as the relay does)."""
    return AIOKafkaProducer(
        bootstrap_servers=KAFKA_BOOTSTRAP,
        acks="all",
        enable_idempotence=True,
        linger_ms=0,
        partitioner=kafka_partitioner,
    )


async def bare_pass(
    conn: asyncpg.Connection, producer: AIOKafkaProducer, after: int, topic_prefix: str = ""
) -> tuple[int, int]:
    """One transaction of the bare loop: the lock, the next rows after id ``after``, sent
    (to ``topic_prefix`` + their topic) and acknowledged, marked. Returns (rows, last id)."""
    async with conn.transaction():
        await conn.execute(LOCK)
        batch = await conn.fetch(CLAIM, BATCH, after)
        if not batch:
            return 0, after
        acks = []
        for r in batch:
            headers = [(k, str(v).encode()) for k, v in json.loads(r["headers"]).items()]
            headers.append(("outbox-id", str(r["id"]).encode()))
            acks.append(
                await producer.send(
                    topic_prefix + r["topic"],
                    value=r["payload"].encode(),
                    key=r["key"].encode(),
                    headers=headers,
                )
            )
        metas = await asyncio.gather(*acks)
        await conn.execute(
            MARK,
            [r["id"] for r in batch],
            [m.partition for m in metas],
            [m.offset for m in metas],
        )
        return len(batch), batch[-1]["id"]


async def bare(url: str, rows: int) -> tuple[float, PerEvent]:
    conn = await asyncpg.connect(url)
    producer = bare_producer()
    await producer.start()
    try:
        meter = CpuMeter(conn)
        mine = time.process_time()
        before = await meter.sample([])
        t = time.perf_counter()
        sent, last = 0, 0
        while sent < rows:
            n, last = await bare_pass(conn, producer, last)
            if not n:
                break
            sent += n
        seconds = time.perf_counter() - t
        after = await meter.sample([], time.process_time() - mine)
        assert sent == rows, (sent, rows)
        return seconds, per_event(before, after, rows)
    finally:
        await producer.stop()
        await conn.close()


async def real(url: str, rows: int) -> tuple[float, PerEvent]:
    relay = OutboxRelay(
        dsn=url, bootstrap=KAFKA_BOOTSTRAP, metrics=Metrics().outbox, config=RelayConfig()
    )
    conn = await asyncpg.connect(url)
    await relay.open()
    try:
        meter = CpuMeter(conn)
        mine = time.process_time()
        before = await meter.sample([])
        t = time.perf_counter()
        published = 0
        while published < rows:
            result = await relay.run_once()
            published += result.published
            if result.failed or (not result.published and not result.more):
                raise RuntimeError(f"relay stopped at {published} of {rows}: {result}")
        seconds = time.perf_counter() - t
        after = await meter.sample([], time.process_time() - mine)
        return seconds, per_event(before, after, rows)
    finally:
        await relay.close()
        await conn.close()


async def run(rows: int = 200_000) -> list[Measure]:
    print(f"\n== relay: {rows:,} outbox rows to Kafka, marked published ==")
    prefix = f"brl{uuid.uuid4().hex[:8]}."
    settings = Settings(kafka_bootstrap=KAFKA_BOOTSTRAP, topic_prefix=prefix)
    topic = settings.topic("pin.calendar.reminder-due.v1")
    figures: dict[str, tuple[float, PerEvent]] = {}
    try:
        await ensure_topics(settings, [topic])
        async with database(prefix="bench_relay_seed") as seed_url:
            conn = await asyncpg.connect(seed_url)
            try:
                t = time.perf_counter()
                await conn.execute(SEED, topic, rows)
                await conn.execute("VACUUM ANALYZE ops.outbox")
            finally:
                await conn.close()
            print(f"  seeded {rows:,} rows in {time.perf_counter() - t:.1f} s")
            seed = seed_url.rsplit("/", 1)[1]
            await admin(
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{seed}'"
            )
            for name, contender in (("bare", bare), ("relay", real)):
                async with database(template=seed) as url:
                    seconds, cpu = await contender(url, rows)
                figures[name] = (seconds, cpu)
                print(
                    f"  {name:<6} {rows:>9,} rows in {seconds:6.2f} s = "
                    f"{rows / seconds:>9,.0f} rows/s"
                )
                print(f"    {cpu.text('this process')}")
    finally:
        await drop_topics(prefix)
    (bare_s, bare_cpu), (real_s, real_cpu) = figures["bare"], figures["relay"]
    print(f"  ratio relay/bare = {bare_s / real_s:.2f}   (reported)")
    detail = f"{rows:,} rows, batch {BATCH}; reference: lock + read + send + mark, one transaction"
    rows_out: list[Measure] = [
        measure("relay: rows published/s vs bare", "rows/s", rows / real_s, rows / bare_s,
                bench="relay", detail=detail),
        measure("relay: CPU per row vs bare", "µs", real_cpu.processes, bare_cpu.processes,
                higher_is_better=False, bench="relay", detail=detail + "; this process"),
    ]  # fmt: skip
    pairs: list[tuple[str, str, Any, Any]] = [
        ("PostgreSQL CPU", "µs", real_cpu.postgres, bare_cpu.postgres),
        ("WAL", "bytes", real_cpu.wal_bytes, bare_cpu.wal_bytes),
    ]
    for label, unit, project, reference in pairs:
        if project is not None and reference is not None:
            rows_out.append(
                measure(f"relay: {label} per row vs bare", unit, project, reference,
                        higher_is_better=False, bench="relay", detail=detail)
            )  # fmt: skip
    return rows_out
