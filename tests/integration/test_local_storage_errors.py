"""The worker's own store failing is not bad input (issue 21, finding 6), on real PostgreSQL and
a real RocksDB-backed Faust table: a cache write the store refuses (its partition database
closed under it: rocksdict raises as it does for a full disk) holds the batch, which is
committed once and acked once the store works again; no valid message is dead-lettered."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import faust
import pytest

from devkit.harness.calendar import make_runtime
from devkit.harness.input_events import Ev, Msg, RecordingDlq
from devkit.harness.profile import SLOT, Harness, MemoryTable, person_document, reminder_events
from devkit.messages.factories import calendar_event, encode
from streams.contracts import CALENDAR_EVENTS
from streams.faust_compat import partition_db, partition_dbs
from streams.input.consumer import ContractConsumer
from streams.runtime import Runtime
from streams.slices.calendar.events import CalendarEventsApplier
from streams.tables.cache import KeyCache, _rocksdict_store
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

TABLE = "calendar-event-cache"


@pytest.fixture
def rocks_table(tmp_path: Path) -> Iterator[Any]:
    app = faust.App("local-storage", store="rocksdb://", datadir=str(tmp_path), autodiscover=False)
    table = app.Table(
        TABLE,
        default=None,
        partitions=4,
        schema=faust.Schema(key_serializer="json", value_serializer="json"),
    )
    assert _rocksdict_store(table) is not None  # the worker's path, not the in-memory one
    yield table
    for db in partition_dbs(_rocksdict_store(table)).values():
        db.close()


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    runtime = make_runtime(database_url)
    try:
        yield runtime
    finally:
        await runtime.close()


async def test_a_store_that_refuses_the_cache_write_holds_the_batch_and_dead_letters_nothing(
    runtime: Runtime, pool: asyncpg.Pool, rocks_table: Any
) -> None:
    store = _rocksdict_store(rocks_table)
    partition_db(store, 0).close()  # every write now fails in RocksDB itself
    sleeps: list[float] = []
    seen: list[dict[str, Any]] = []
    valid = [calendar_event() for _ in range(5)]

    async def store_recovers_on_the_third_retry(delay: float) -> None:
        sleeps.append(delay)
        seen.append(cache.failing())
        # While it waits, the batch is committed to PostgreSQL (the ledger is right) ...
        stored = await pool.fetchval("SELECT count(*) FROM calendar.events")
        assert stored == len(valid)
        if len(sleeps) == 3:
            dbs = partition_dbs(store)
            del dbs[0]  # ... and once the disk is back, the partition database reopens

    cache = KeyCache(rocks_table, runtime.metrics.agents, sleep=store_recovers_on_the_third_retry)
    dlq = RecordingDlq()
    outcomes: list[tuple[int, str]] = []
    consumer = ContractConsumer(
        CALENDAR_EVENTS,
        CalendarEventsApplier(runtime, cache),
        dlq,  # type: ignore[arg-type]
        runtime.metrics.agents,
        on_outcome=lambda ev, outcome, reason: outcomes.append((ev.message.offset, outcome)),
    )
    bad = b'{"EventId": "not a uuid"}'
    events = [Ev(Msg(encode(m), offset=i)) for i, m in enumerate(valid)]
    events.append(Ev(Msg(bad, offset=len(valid))))

    await consumer.handle(events)  # type: ignore[arg-type]
    await cache.flush()

    # Only the invalid message is dead-lettered; every valid one is applied, once.
    assert [d["value"] for d in dlq.sent] == [bad], dlq.sent
    assert sorted(outcomes) == [(i, "applied") for i in range(len(valid))] + [(5, "dlq")]
    assert sleeps == [0.2, 0.4, 0.8]
    assert seen[0]["write"]["reason"] == "local_storage_error"
    assert seen[0]["write"]["error"] == "DbClosedError: DB instance already closed"
    assert seen[-1]["write"]["errors"] == 3
    # The reads failed too (before the commit): misses, PostgreSQL decided.
    assert seen[0]["read"]["errors"] == len(valid)
    assert set(cache.failing()) == {"read"}  # writes work again; reads not yet tried
    rows = await pool.fetch("SELECT event_id::text AS id, version FROM calendar.events")
    assert {(r["id"], r["version"]) for r in rows} == {(m["EventId"], 1) for m in valid}
    for m in valid:  # the cache holds what was committed (every message is of partition 0)
        assert cache.read(events[0], m["EventId"])["v"] == 1  # type: ignore[arg-type]
    assert cache.failing() == {}  # the store works again: /health is ready
    metric = runtime.metrics.registry.get_sample_value
    assert (
        metric("reminders_stream_local_storage_errors_total", {"table": TABLE, "op": "write"}) == 3
    )
    assert metric("reminders_stream_local_storage_failing", {"table": TABLE}) == 0


class RefusingMemoryTable(MemoryTable):
    """The expiry marks table refusing writes as a full disk does (a bare Exception with
    RocksDB's status, as rocksdict raises it)."""

    writes_fail = 0

    def __setitem__(self, key: str, value: Any) -> None:
        if self.writes_fail:
            self.writes_fail -= 1
            raise Exception("IO error: No space left on device: While appending to file")
        super().__setitem__(key, value)


async def test_the_expiry_owner_worker_waits_for_a_refused_cache_write_and_sends_once(
    database_url: str, pool: asyncpg.Pool
) -> None:
    h = Harness(database_url, cache=True)
    try:
        delays: list[float] = []

        async def sleep(delay: float) -> None:
            delays.append(delay)

        table = RefusingMemoryTable()
        h.cache = h.owners.cache = KeyCache(table, h.runtime.metrics.agents, sleep=sleep)  # type: ignore[arg-type]
        docs = [person_document(DaysLeft=7) for _ in range(3)]
        await h.apply(*docs)
        table.writes_fail = 2
        first = await h.run().run_once(RunContext.at(SLOT, clock=h.runtime.clock))
        assert delays == [0.2, 0.4]  # held until the store took the marks
        assert first.reminders_sent == len(docs)
        assert len(table) == len(docs) and h.cache.failing() == {}
        again = await h.run().run_once(
            RunContext.at(SLOT, clock=h.runtime.clock)
        )  # a rerun of the slot: the ledger says sent
        assert again.reminders_sent == 0
        assert len(await reminder_events(pool)) == len(docs)
    finally:
        await h.close()
