"""A run's progress counts each work item once, however often Kafka delivers it: a worker that
dies after writing its progress and before its offsets are committed has its records
delivered again, to another worker that never saw them, and the run must not count their
owners twice (it would stop waiting while owners are still to do, and report them done).
The same for a large owner's continuation sent twice (the record that sent it delivered again)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest

from db import document_expiry_runs as runs_repo
from devkit.harness.profile import (
    SLOT,
    TODAY,
    Harness,
    owners_work,
    person_document,
    reminder_events,
    seed_documents,
)
from streams.input.consumer import Decoded
from streams.slices.profile.owners import OwnerWorker
from streams.slices.profile.work import OwnersWork, RunOrder
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration


class KafkaEvent:
    """What the agent hands over for a record read from Kafka: its coordinates."""

    def __init__(self, partition: int, offset: int) -> None:
        self.message = type("Message", (), {"partition": partition, "offset": offset})()


class TopicOfItems:
    """The run's fan-out and the workers' continuations on one list of records: each item gets
    the next offset of partition 0, as the owner-work topic would give it."""

    waits = True

    def __init__(self) -> None:
        self.records: list[Decoded[OwnersWork]] = []
        self.closed = asyncio.Event()

    def _append(self, item: OwnersWork) -> None:
        self.records.append(Decoded(KafkaEvent(0, len(self.records)), item))  # type: ignore[arg-type]

    async def start(self) -> None:
        return None

    async def send(self, order: RunOrder, owners: Sequence[uuid.UUID]) -> None:
        for start in range(0, len(owners), 2):  # two owners per item
            self._append(owners_work(order, owners[start : start + 2]))

    async def close(self) -> None:
        self.closed.set()

    async def send_continuations(self, items: Sequence[tuple[Any, OwnersWork]]) -> None:
        for _, item in items:
            self._append(item)


class Continuations:
    def __init__(self, topic: TopicOfItems) -> None:
        self.topic = topic

    async def send(self, items: Sequence[tuple[Any, OwnersWork]]) -> None:
        await self.topic.send_continuations(items)


async def progress(pool: asyncpg.Pool, run_id: str) -> tuple[int, int]:
    row = await runs_repo.get(pool, run_id)
    assert row is not None
    return row.owners_done, row.owners_failed


async def test_records_delivered_again_to_another_worker_count_their_owners_once(
    database_url: str, pool: asyncpg.Pool
) -> None:
    h = Harness(database_url)
    run: asyncio.Task[Any] | None = None
    try:
        owners = [str(uuid.uuid4()) for _ in range(8)]
        await h.apply(*(person_document(OwnerUserId=o, DaysLeft=5) for o in owners))
        topic = TopicOfItems()
        run = asyncio.create_task(h.run(topic).run_once(RunContext.at(SLOT, clock=h.runtime.clock)))
        await topic.closed.wait()
        run_id = topic.records[0].message.run_id
        first, rest = topic.records[:2], topic.records[2:]
        assert len(first) == 2 and len(rest) == 2
        await h.owners(first)  # worker A: 4 owners done, then it dies before its offsets commit
        assert await progress(pool, run_id) == (4, 0)
        other = OwnerWorker(h.runtime, h.metrics)  # worker B takes the partition over
        await other(first)
        assert await progress(pool, run_id) == (4, 0), "the same records counted twice"
        assert not run.done()
        await other(rest)
        result = await asyncio.wait_for(run, 30)
        assert (result.owners_total, result.owners_done, result.owners_notified) == (8, 8, 8)
        assert result.reminders_sent == len(await reminder_events(pool)) == 8
    finally:
        if run is not None:
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
        await h.close()


async def test_a_large_owners_continuation_sent_twice_counts_the_owner_done_once(
    database_url: str, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(database_url, document_expiry_claim_chunk_documents=10)
    run: asyncio.Task[Any] | None = None
    try:
        big = uuid.uuid4()
        await seed_documents(pool, [big], 25, TODAY)
        small = str(uuid.uuid4())
        await h.apply(person_document(OwnerUserId=small, DaysLeft=5))
        topic = TopicOfItems()
        run = asyncio.create_task(h.run(topic).run_once(RunContext.at(SLOT, clock=h.runtime.clock)))
        await topic.closed.wait()
        assert len(topic.records) == 1  # both owners in one item
        run_id = topic.records[0].message.run_id
        worker = OwnerWorker(h.runtime, h.metrics, continuations=Continuations(topic))
        # Worker A claims the first chunk, sends the big owner's continuation and dies before
        # its progress is written (and before the record is acked).
        real = runs_repo.progress

        async def dies(*args: Any) -> None:
            raise ConnectionResetError("the worker died")

        monkeypatch.setattr(runs_repo, "progress", dies)
        with pytest.raises(ConnectionResetError):
            await worker(topic.records[:1])
        monkeypatch.setattr(runs_repo, "progress", real)
        assert len(topic.records) == 2
        # Worker B gets the record again: it sends a second continuation of the same owner.
        other = OwnerWorker(h.runtime, h.metrics, continuations=Continuations(topic))
        await other(topic.records[:1])
        assert len(topic.records) == 3
        assert await progress(pool, run_id) == (1, 0)  # the small owner
        done = 1
        while done < len(topic.records):  # both chains, to their ends
            await other(topic.records[done : done + 1])
            done += 1
        assert await progress(pool, run_id) == (2, 0), "the big owner counted done twice"
        result = await asyncio.wait_for(run, 30)
        # (Its reminders_sent is short of 26 by the first chunk: worker A died before its
        # progress, and the redone chunk counts as skipped; the ledger has each document once.)
        assert (result.owners_total, result.owners_done, result.owners_failed) == (2, 2, 0)
        documents = [d for e in await reminder_events(pool) for d in e["Documents"]]
        assert len(documents) == len({d["DocumentId"] for d in documents}) == 26
    finally:
        if run is not None:
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
        await h.close()
