"""Two workers on one database and one set of topics, one of them to be frozen (SIGSTOP):
what its sessions hold, reschedules of the events it holds, where the input stands, and the
audit of the output topic after it is continued."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import ConsumerRecord

from db.outbox import LANE_LOCK_SPACE
from devkit.loads.calendar_load import calendar_message
from devkit.loads.reminder_audit import DUE_TOPIC, assigned, audit, read_to_end
from devkit.stacks.pause import cont
from devkit.wait import NotWithin, eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

EVENTS_TOPIC = "pin.calendar.events.v1"
IDLE_IN_TX_TIMEOUT = 5
ROWS = 20_000
PARTITIONS = 4


def input_partition(event_id: uuid.UUID) -> int:
    """The partition Kafka's default partitioner picks for the event's key."""
    every = list(range(PARTITIONS))
    return int(DefaultPartitioner()(str(event_id).encode(), every, every))


@dataclass
class Pair:
    db: str
    kafka: str
    prefix: str
    a: WorkerProcess
    b: WorkerProcess

    @property
    def pg_port(self) -> int:
        return urlsplit(self.db).port or 5432


@contextlib.contextmanager
def started_pair(
    module_database_url: str, kafka_bootstrap: str, module_topic_prefix: str, module_tmp: Path
) -> Iterator[Pair]:
    """Workers A and B (Kafka client ids ``paused-a``, ``paused-b``) ready on the database and
    topics, with the product's knobs for a stuck peer set short; both continued and stopped
    on exit."""
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=module_topic_prefix)

    async def prepare() -> None:
        await ensure_topics(settings, contract_topic_names(settings))
        conn = await asyncpg.connect(module_database_url)
        try:  # which rows a frozen session holds (contrib, shipped with Debian's server)
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pgrowlocks")
        finally:
            await conn.close()

    asyncio.run(prepare())
    env = worker_env(
        module_database_url,
        kafka_bootstrap,
        module_topic_prefix,
        TIMER_CALENDAR_DISPATCH_INTERVAL_SECONDS="1",
        TIMER_CALENDAR_DISPATCH_MAX_DURATION_SECONDS="0.5",
        # The product's knobs for a stuck peer (tests/e2e/test_paused_worker_dispatch.py says why).
        DB_LOCK_TIMEOUT_SECONDS="5",
        DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS=str(IDLE_IN_TX_TIMEOUT),
        OUTBOX_MAX_LANES_PER_PASS="8",
        OUTBOX_PUBLISH_TIMEOUT_SECONDS="2",  # at most half the idle timeout (validated)
        OUTBOX_BATCH_SIZE="200",
        # B takes over A's input partitions 10 s after A stops heartbeating (Faust: 60 s).
        BROKER_SESSION_TIMEOUT="10",
        BROKER_HEARTBEAT_INTERVAL="1",
    )
    # Distinct Kafka client ids tell the two members apart in the group description.
    a = WorkerProcess({**env, "BROKER_CLIENT_ID": "paused-a"}, module_tmp, "paused-a")
    b = WorkerProcess({**env, "BROKER_CLIENT_ID": "paused-b"}, module_tmp, "paused-b")
    try:
        a.start()
        b.start()

        async def ready() -> None:
            await asyncio.gather(a.wait_ready(), b.wait_ready())

        asyncio.run(ready())
        yield Pair(module_database_url, kafka_bootstrap, module_topic_prefix, a, b)
    finally:
        for w in (a, b):
            if w.proc is not None:
                cont(w.proc.pid)
            w.stop()


class TopicWatch:
    """Reads the output topic from the beginning in the background."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.records: list[tuple[float, ConsumerRecord[bytes, bytes]]] = []
        self.first_seen: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None

    async def __aenter__(self) -> TopicWatch:
        c = AIOKafkaConsumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await c.start()
        await c.seek_to_beginning(*await assigned(c, self.topic))
        self._consumer = c
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        assert self._consumer is not None
        while True:
            batch = await self._consumer.getmany(timeout_ms=200)
            now = time.monotonic()
            for records in batch.values():
                for r in records:
                    self.records.append((now, r))
                    self.first_seen.setdefault(json.loads(r.value or b"{}")["ReminderId"], now)

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

    async def wait_for(self, reminder_id: str, timeout: float) -> float:
        """When ``reminder_id`` first reached the topic (monotonic clock)."""
        await eventually(
            lambda: reminder_id in self.first_seen,
            timeout=timeout,
            what=f"reminder {reminder_id} on {self.topic}",
            interval=0.1,
        )
        return self.first_seen[reminder_id]


async def dispatch_holders(conn: asyncpg.Connection, pids: list[int]) -> list[int]:
    """Backends of ``pids`` inside a dispatch transaction that has locked reminder rows.

    The table lock alone is not enough: PostgreSQL takes it when the claim is parsed, and a
    connection's first claim is parsed, then asyncpg looks up its types - a backend stopped
    there is in the transaction but holds no row yet (seen in CI)."""
    rows = await conn.fetch(
        "SELECT DISTINCT pid FROM pg_locks WHERE pid = ANY($1::int[]) AND granted "
        "AND relation = 'calendar.event_reminders'::regclass "
        "AND mode IN ('RowShareLock', 'RowExclusiveLock')",
        pids,
    )
    if not rows:  # the cheap look first; pgrowlocks reads the whole table
        return []
    rows = await conn.fetch(
        "SELECT DISTINCT p AS pid FROM pgrowlocks('calendar.event_reminders') l, "
        "unnest(l.pids) AS p WHERE p = ANY($1::int[])",
        [r["pid"] for r in rows],
    )
    return [r["pid"] for r in rows]


async def relay_holders(conn: asyncpg.Connection, pids: list[int]) -> list[int]:
    """Backends of ``pids`` holding outbox lane locks (inside a relay pass)."""
    rows = await conn.fetch(
        "SELECT DISTINCT pid FROM pg_locks WHERE pid = ANY($1::int[]) AND granted "
        "AND locktype = 'advisory' AND classid = $2::oid",
        pids,
        LANE_LOCK_SPACE,
    )
    return [r["pid"] for r in rows]


async def reschedule(
    pair: Pair, conn: asyncpg.Connection, event_id: uuid.UUID
) -> tuple[datetime, int]:
    """Produce Version+1 of the event, starting 6 s from now, one reminder at the start.
    Returns the new StartAt (as sent: milliseconds) and the input partition."""
    row = await conn.fetchrow(
        "SELECT tenant_id, owner_user_id, kind, time_zone, version "
        "FROM calendar.events WHERE event_id = $1",
        event_id,
    )
    assert row is not None
    now = datetime.now(UTC)
    start = now + timedelta(seconds=6)
    msg = calendar_message(
        event_id=str(event_id),
        tenant_id=str(row["tenant_id"]),
        owner_user_id=str(row["owner_user_id"]),
        start_at=start,
        offsets=[0],
        version=row["version"] + 1,
        occurred_at=now,
        kind=row["kind"],
        time_zone=row["time_zone"],
    )
    producer = AIOKafkaProducer(bootstrap_servers=pair.kafka, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        meta = await producer.send_and_wait(
            pair.prefix + EVENTS_TOPIC, json.dumps(msg).encode(), key=str(event_id).encode()
        )
    finally:
        await producer.stop()
    return start.replace(microsecond=start.microsecond // 1000 * 1000), meta.partition


async def nudge_report(
    pair: Pair, conn: asyncpg.Connection, partition: int, event_id: uuid.UUID
) -> str:
    """Diagnosis only: does a later record on the same partition bring the reschedule in?"""
    now = datetime.now(UTC)
    other = str(uuid.uuid4())
    msg = calendar_message(
        event_id=other,
        tenant_id=str(uuid.uuid4()),
        owner_user_id=str(uuid.uuid4()),
        start_at=now + timedelta(days=1),
        offsets=[],
        version=1,
        occurred_at=now,
    )
    producer = AIOKafkaProducer(bootstrap_servers=pair.kafka, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(
            pair.prefix + EVENTS_TOPIC,
            json.dumps(msg).encode(),
            key=other.encode(),
            partition=partition,
        )
    finally:
        await producer.stop()
    try:
        version = await eventually(
            lambda: conn.fetchval(
                "SELECT version FROM calendar.events WHERE event_id = $1", event_id
            ),
            timeout=20,
            what="the reschedule applied",
            until=lambda v: v == 2,
            interval=0.2,
        )
    except NotWithin:
        version = None  # reported below, not failed here: this is the diagnosis
    seen = await conn.fetchval(
        "SELECT count(*) FROM calendar.events WHERE event_id = $1", uuid.UUID(other)
    )
    return (
        f"after one more record on partition {partition}: reschedule "
        f"{'applied' if version == 2 else 'still not applied'}, the new record "
        f"{'applied' if seen else 'not applied'} within 20s"
    )


async def owned_partitions(pair: Pair, client_id: str) -> set[int]:
    """Input partitions the group member with ``client_id`` is assigned (group description)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=pair.kafka)
    await admin.start()
    try:
        responses = await admin.describe_consumer_groups([f"{pair.prefix}reminders"])
    finally:
        await admin.close()
    owned: set[int] = set()
    for response in responses:
        for group in response.groups:
            for member in group[-2] if isinstance(group[-1], int) else group[-1]:
                if client_id not in member:
                    continue
                assignment = ConsumerProtocolMemberAssignment.decode(member[-1])
                for topic, partitions in assignment.assignment:
                    if topic == pair.prefix + EVENTS_TOPIC:
                        owned.update(partitions)
    return owned


async def input_report(pair: Pair, partition: int) -> str:
    """Where the reschedule sits: the group's committed offset and B's view of its input."""
    admin = AIOKafkaAdminClient(bootstrap_servers=pair.kafka)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(f"{pair.prefix}reminders")
    finally:
        await admin.close()
    committed = {
        tp.partition: meta.offset
        for tp, meta in offsets.items()
        if tp.topic == pair.prefix + EVENTS_TOPIC
    }
    try:
        _, status = await asyncio.to_thread(pair.b.get, "/status?format=json")
        agents = status.get("agents") if isinstance(status, dict) else status
    except OSError as exc:
        agents = repr(exc)
    return f"reschedule in partition {partition}; committed offsets {committed}; B agents {agents}"


async def poll(conn: asyncpg.Connection, sql: str, *args: Any, until: Any, timeout: float) -> Any:
    return await eventually(
        lambda: conn.fetchval(sql, *args), timeout=timeout, what=sql, until=until, interval=0.1
    )


async def session_report(conn: asyncpg.Connection, backends: list[int]) -> str:
    rows = await conn.fetch(
        "SELECT pid, state, now() - xact_start AS in_tx, left(query, 60) AS query "
        "FROM pg_stat_activity WHERE pid = ANY($1::int[])",
        backends,
    )
    return "; ".join(f"{dict(r)}" for r in rows) or "A's frozen sessions are gone"


async def drain_and_audit(pair: Pair, conn: asyncpg.Connection) -> tuple[int, int]:
    """After SIGCONT: both workers healthy, nothing due left, outbox published; then every
    Sent reminder is on the topic under exactly one outbox record. Returns (sent, re-publishes)."""
    await asyncio.gather(pair.a.wait_ready(timeout=120), pair.b.wait_ready(timeout=120))
    await poll(
        conn,
        "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Pending' AND due_at < now()",
        until=lambda v: v == 0,
        timeout=120,
    )
    await poll(
        conn,
        "SELECT count(*) FROM ops.outbox WHERE published_at IS NULL",
        until=lambda v: v == 0,
        timeout=60,
    )
    sent = {
        str(r["reminder_id"])
        for r in await conn.fetch(
            "SELECT reminder_id FROM calendar.event_reminders WHERE status = 'Sent'"
        )
    }
    records = await read_to_end(pair.kafka, pair.prefix + DUE_TOPIC)
    on_topic = {json.loads(r.value or b"{}")["ReminderId"] for r in records}
    report = audit(records, {}, {})
    assert report.duplicated_effects == 0, report.duplicated[:10]
    assert on_topic == sent, (
        f"{len(sent - on_topic)} Sent reminders not on the topic, "
        f"{len(on_topic - sent)} on the topic but not Sent"
    )
    assert report.out_of_order_keys == 0
    print(
        f"\naudit: {len(sent)} Sent reminders, {len(records)} records, "
        f"{report.republishes} re-publishes (same outbox-id), 0 duplicated effects"
    )
    return len(sent), report.republishes
