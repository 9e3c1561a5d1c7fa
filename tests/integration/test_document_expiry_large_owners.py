"""Owners of any size: an owner's documents are claimed in chunks (each its own statement and
transaction, continued after the owners queued behind it), its reminders of one run come in
events of at most DOCUMENT_EXPIRY_MAX_DOCUMENTS_PER_EVENT documents with the run's
correlation id, a crash between chunks continues without sending anything again, and a large
owner has no cache value and no long log line."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from devkit.harness.profile import (
    MASK,
    REMINDER_TOPIC,
    SLOT,
    TODAY,
    Harness,
    MemoryTable,
    owners_work,
    reminder_events,
    seed_documents,
)
from streams import faults
from streams.contracts import decode
from streams.input.consumer import Decoded
from streams.slices.profile.owner_cache import CACHE_MAX_DOCUMENTS
from streams.slices.profile.owners import OwnerWorker
from streams.slices.profile.settings import DocumentExpirySettings
from streams.slices.profile.work import OWNER_WORK, KafkaFanout, RunOrder, TopicContinuations
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

# What Kafka accepts by default (the relay's producer and the brokers' max.message.bytes).
KAFKA_LIMIT = 1024 * 1024


class KafkaEvent:
    """What the agent hands over for a record read from Kafka: its coordinates."""

    def __init__(self, partition: int, offset: int) -> None:
        self.message = type("Message", (), {"partition": partition, "offset": offset})()


async def event_rows(pool: asyncpg.Pool) -> list[tuple[int, str, str, int, int]]:
    """(outbox id, OwnerUserId, correlation-id, documents, payload bytes) of every reminder
    event, in commit order."""
    rows = await pool.fetch(
        "SELECT id, key, payload, headers FROM ops.outbox WHERE topic LIKE '%' || $1 ORDER BY id",
        REMINDER_TOPIC,
    )
    return [
        (
            r["id"],
            r["key"],
            r["headers"]["correlation-id"],
            len(json.loads(r["payload"])["Documents"]),
            len(r["payload"].encode()),
        )
        for r in rows
    ]


def reminded(events: Sequence[dict[str, Any]]) -> Counter[str]:
    """How many times each DocumentId was listed in ``events``."""
    return Counter(d["DocumentId"] for e in events for d in e["Documents"])


async def marked_documents(pool: asyncpg.Pool) -> int:
    return int(
        await pool.fetchval(
            "SELECT count(DISTINCT document_id) FROM profile.document_expiry_reminders"
        )
    )


async def test_an_owner_of_10000_documents_expiring_on_one_day_is_reminded_once_under_the_limit(
    database_url: str, pool: asyncpg.Pool
) -> None:
    h = Harness(database_url)
    try:
        big, small = uuid.uuid4(), uuid.uuid4()
        await seed_documents(pool, [big], 10_000, TODAY)
        await seed_documents(pool, [small], 2, TODAY)
        result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
        events = await reminder_events(pool)
        counts = reminded(events)
        assert len(counts) == 10_002 and set(counts.values()) == {1}, "every document once"
        rows = await event_rows(pool)
        expiry = h.runtime.settings.of(DocumentExpirySettings)
        limit = expiry.document_expiry_max_documents_per_event
        assert max(n for _, _, _, n, _ in rows) <= limit
        assert max(size for *_, size in rows) < KAFKA_LIMIT // 4
        # All of the owner's events carry the run's correlation id (and its work id).
        assert {c for _, key, c, _, _ in rows} == {result.run_id}
        assert len({json.dumps(e["_headers"]) for e in events if e["OwnerUserId"] == str(big)}) == 1
        # 1,000 documents per event within a chunk (5,000 documents, OwnerUserId order): 10
        # events, or 11 when the small owner's work shares the big owner's first chunk
        # (4,998 + 5,000 + 2 documents), which depends on how the work items are batched.
        assert Counter(key for _, key, *_ in rows)[str(big)] in (10, 11)
        assert (result.owners_done, result.owners_notified, result.reminders_sent) == (
            2,
            2,
            10_002,
        )
        again = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
        assert (again.reminders_sent, len(await event_rows(pool))) == (0, len(rows))
    finally:
        await h.close()


async def test_a_crash_between_chunks_continues_and_never_sends_a_committed_chunk_again(
    database_url: str, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(
        database_url,
        cache=True,
        document_expiry_claim_chunk_documents=1000,
        document_expiry_max_documents_per_event=300,
    )
    try:
        owner = uuid.uuid4()
        await seed_documents(pool, [owner], 2500, TODAY + timedelta(days=3))
        await pool.execute(
            "INSERT INTO profile.document_expiry_runs (run_id, slot, as_of_date, thresholds, "
            "started_at) VALUES ('run-a', $1, $2, $3, $1)",
            SLOT,
            TODAY,
            [30, 7, 1, 0],
        )
        item = owners_work(RunOrder("document-expiry", "run-a", SLOT, (30, 7, 1, 0)), [owner])
        # The worker dies after its second chunk committed (before the third, before the ack).
        monkeypatch.setattr(faults, "_raising", ("expiry_owners.after_chunk", 2))
        monkeypatch.setattr(faults, "_passes", {})
        with pytest.raises(faults.InjectedFault):
            await h.owners([Decoded(KafkaEvent(0, 5), item)])
        first = reminded(await reminder_events(pool))
        assert (len(first), set(first.values())) == (2000, {1})
        assert await marked_documents(pool) == 2000
        # The record was not acked: it comes again, and the owner continues where it stopped.
        monkeypatch.setattr(faults, "_raising", None)
        await h.owners([Decoded(KafkaEvent(0, 5), item)])
        events = await reminder_events(pool)
        counts = reminded(events)
        assert (len(counts), set(counts.values())) == (2500, {1}), "each document once"
        assert max(len(e["Documents"]) for e in events) <= 300
        assert {e["_headers"]["correlation-id"] for e in events} == {"run-a"}
        assert await marked_documents(pool) == 2500
        row = await pool.fetchrow(
            "SELECT owners_done, owners_failed FROM profile.document_expiry_runs"
        )
        assert tuple(row) == (1, 0)
    finally:
        await h.close()


async def test_a_large_owner_has_no_cache_value_and_its_log_lines_carry_counts(
    database_url: str, pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness(database_url, cache=True)
    try:
        big, small = uuid.uuid4(), uuid.uuid4()
        await seed_documents(pool, [big], CACHE_MAX_DOCUMENTS + 500, TODAY)
        await seed_documents(pool, [small], 3, TODAY)
        assert h.cache is not None
        table = h.cache.table
        assert isinstance(table, MemoryTable)
        # A value an older version wrote for the large owner (it claims every mark).
        table[str(big)] = ";".join(f"{uuid.uuid4()}=30,7,1,0" for _ in range(5000))
        caplog.set_level(logging.INFO, logger="streams.slices.profile.owners")
        result = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
        assert result.reminders_sent == CACHE_MAX_DOCUMENTS + 503
        assert len(str(table[str(small)]).split(";")) == 3
        assert not table.get(str(big)), "a large owner goes to the ledger: no value"
        lines = [r.getMessage() for r in caplog.records if "action=reminder_queued" in r.message]
        assert lines and max(len(line) for line in lines) < 2000
        assert MASK not in caplog.text
        # The next day the large owner is settled by the ledger, not by a stale value.
        again = await h.run().run_once(
            RunContext.at(SLOT + timedelta(days=1), clock=h.runtime.clock)
        )
        assert again.reminders_sent == 0 and not table.get(str(big))
    finally:
        await h.close()


class ProducerTopic:
    """The app topic's ``send`` as TopicContinuations uses it, on an aiokafka producer."""

    def __init__(self, producer: AIOKafkaProducer, topic: str) -> None:
        self.producer, self.topic = producer, topic

    async def send(self, *, key: bytes, value: bytes, partition: int) -> Any:
        return await self.producer.send(self.topic, value, key=key, partition=partition)


class SignalledFanout(KafkaFanout):
    """The run's Kafka fan-out, telling when every owner is on the topic."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.closed = asyncio.Event()

    async def close(self) -> None:
        await super().close()
        self.closed.set()


async def test_ordinary_owners_wait_for_one_chunk_of_a_50000_document_owner_on_their_partition(
    database_url: str, pool: asyncpg.Pool, kafka_bootstrap: str, topic_prefix: str
) -> None:
    chunk = 2000
    h = Harness(
        database_url,
        kafka_bootstrap=kafka_bootstrap,
        topic_prefix=topic_prefix,
        topic_partitions=1,  # every owner on the large owner's partition
        document_expiry_claim_chunk_documents=chunk,
        document_expiry_max_documents_per_event=500,
    )
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    consumer = None
    try:
        big = uuid.uuid4()
        ordinary = [uuid.uuid4() for _ in range(1000)]
        # The large owner's documents come first in the scan (ExpiresAt ascending).
        await seed_documents(pool, [big], 50_000, TODAY + timedelta(days=20))
        await seed_documents(pool, ordinary, 5, TODAY + timedelta(days=25))
        fanout = SignalledFanout(h.runtime.settings)
        run = asyncio.create_task(
            h.run(fanout).run_once(RunContext.at(SLOT, clock=h.runtime.clock))
        )
        await asyncio.wait_for(fanout.closed.wait(), 120)
        # The agent of the owners' partition: batches of records, a continuation back on it.
        topic = h.runtime.settings.topic(OWNER_WORK.name)
        await producer.start()
        owners = OwnerWorker(
            h.runtime, h.metrics, None, TopicContinuations(ProducerTopic(producer, topic))
        )
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest", group_id=None
        )
        await consumer.start()
        started = time.monotonic()
        items = 0
        while not run.done():
            for records in (await consumer.getmany(timeout_ms=200, max_records=500)).values():
                items += len(records)
                await owners(
                    [
                        Decoded(KafkaEvent(r.partition, r.offset), decode(OWNER_WORK, r.value))
                        for r in records
                    ]
                )
            assert time.monotonic() - started < 300, "the run did not end"
        result = await run
        elapsed = time.monotonic() - started
        rows = await event_rows(pool)
        last_ordinary = max(i for i, key, *_ in rows if key != str(big))
        big_before = sum(n for i, key, _, n, _ in rows if key == str(big) and i < last_ordinary)
        print(
            f"\n50,000-document owner beside 1,000 owners: {elapsed:.1f}s, {items} work items, "
            f"{len(rows)} events; the large owner's documents reminded before the last "
            f"ordinary owner: {big_before} (chunk {chunk})"
        )
        assert big_before <= chunk, "ordinary owners waited for more than one chunk"
        counts = reminded(await reminder_events(pool))
        assert (len(counts), set(counts.values())) == (55_000, {1}), "nothing lost, nothing twice"
        assert max(n for _, _, _, n, _ in rows) <= 500
        assert {c for _, _, c, _, _ in rows} == {result.run_id}
        assert (result.owners_total, result.owners_done, result.owners_failed) == (1001, 1001, 0)
        assert (result.owners_notified, result.reminders_sent) == (1001, 55_000)
    finally:
        if consumer is not None:
            await consumer.stop()
        await producer.stop()
        await h.close()
