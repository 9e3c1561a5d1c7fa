"""The run's per-owner fan-out through real Kafka: work items on the internal topic each
carry owners that all hash to the item's partition (keyed by its first owner), every owner
once with the identity name:ownerId:slot; the run waits for the per-owner workers on its
progress row, and ends on its budget when nobody does them."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from unittest.mock import MagicMock

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord

from devkit.harness.profile import SLOT, Harness, items, person_document, reminder_events
from devkit.kafka import read_to_end
from streams.clock import ManualClock
from streams.contracts import decode
from streams.input.consumer import Decoded
from streams.slices.profile.work import OWNER_WORK, KafkaFanout, RunOrder, partition_of
from streams.timers.context import RunContext
from streams.timers.slots import fanout_key

pytestmark = pytest.mark.integration


@pytest.fixture
async def h(database_url: str, kafka_bootstrap: str, topic_prefix: str) -> AsyncIterator[Harness]:
    harness = Harness(
        database_url, cache=True, kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix
    )
    yield harness
    await harness.close()


def owners_with_documents(n: int) -> list[dict[str, Any]]:
    docs = []
    for i in range(n):
        owner = str(uuid.uuid4())
        docs += [person_document(OwnerUserId=owner, DaysLeft=d) for d in range(i % 3, 30, 11)]
    return docs


async def take(
    bootstrap: str, topic: str, owners: int, timeout: float = 30.0
) -> list[ConsumerRecord[bytes, bytes]]:
    """Records of ``topic`` from its start until they carry ``owners`` owners (fails on the
    deadline)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    out: list[ConsumerRecord[bytes, bytes]] = []
    seen = 0
    try:
        deadline = time.monotonic() + timeout
        while seen < owners:
            assert time.monotonic() < deadline, f"{seen} of {owners} owners in {timeout}s"
            for records in (await consumer.getmany(timeout_ms=200)).values():
                out.extend(records)
                seen += sum(len(decode(OWNER_WORK, r.value).owner_user_ids) for r in records)
    finally:
        await consumer.stop()
    return out


async def test_owners_go_out_by_partition_each_once_and_the_run_waits_for_them(
    h: Harness, kafka_bootstrap: str, topic_prefix: str
) -> None:
    docs = owners_with_documents(40)
    await h.apply(*docs)
    owners = {d["OwnerUserId"] for d in docs}
    # At most 4 owners per item: several items per partition, the last ones sent at close.
    fanout = KafkaFanout(h.runtime.settings, owners_per_item=4)
    # Batches of 5 documents: owners show up in several and are still handed out once.
    run = asyncio.create_task(
        h.run(fanout, batch_size=5).run_once(RunContext.at(SLOT, clock=h.runtime.clock))
    )
    topic = topic_prefix + OWNER_WORK.name
    records = await take(kafka_bootstrap, topic, len(owners))
    assert not run.done()  # it waits for the owners to be done
    partitions = h.runtime.settings.topic_partitions
    works, handed_out = [], []
    for r in records:
        work = decode(OWNER_WORK, r.value)
        assert 1 <= len(work.owner_user_ids) <= 4
        # Every owner of the item hashes to the item's partition, and so does its key.
        assert r.key is not None and r.key.decode() == str(work.owner_user_ids[0])
        assert {partition_of(o, partitions) for o in work.owner_user_ids} == {r.partition}
        assert (work.name, work.as_of, work.thresholds_days) == (
            "document-expiry",
            SLOT,
            [30, 7, 1, 0],
        )
        order = work.order()
        for owner in work.owner_user_ids:
            assert order.work(owner).work_id == fanout_key("document-expiry", owner, SLOT)
        handed_out += [str(o) for o in work.owner_user_ids]
        works.append(Decoded(MagicMock(), work))
    assert sorted(handed_out) == sorted(owners)  # each owner exactly once
    # The per-owner worker, as its agent applies a batch.
    outcome = await h.owners(works)
    assert outcome.applied_positions == set(range(len(works)))
    result = await asyncio.wait_for(run, 30)
    assert (result.owners_total, result.owners_done, result.owners_notified) == (40, 40, 40)
    assert (
        result.reminders_sent
        == len(docs)
        == len(items(await reminder_events(await h.runtime.pool())))
    )
    on_topic = await read_to_end(kafka_bootstrap, topic)
    assert len(on_topic) == len(records) < len(owners)
    assert len({r.partition for r in on_topic}) > 1  # spread by owner over the 4 partitions


async def test_owners_go_out_in_key_order_a_window_at_a_time(
    h: Harness, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """The scan finds owners all over the key space (here: descending, the worst order); the
    fan-out gathers a window, sorts it by OwnerUserId and sends it (the next window twice as
    large, up to the most; the rest at close). So each partition's items carry owners in
    key order within each window, and a worker's transaction gets neighbours."""
    fanout = KafkaFanout(h.runtime.settings, owners_per_item=1, window=(10, 20))
    owners = sorted((uuid.uuid4() for _ in range(50)), key=lambda o: o.int, reverse=True)
    await fanout.start()
    try:
        for start in range(0, len(owners), 5):  # as the scan's batches give them
            await fanout.send(RunOrder("document-expiry", "run-1", SLOT, (30, 7, 1, 0)),
                              owners[start : start + 5])  # fmt: skip
    finally:
        await fanout.close()
    records = await take(kafka_bootstrap, topic_prefix + OWNER_WORK.name, len(owners))
    sent: dict[int, list[uuid.UUID]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        sent.setdefault(r.partition, []).extend(decode(OWNER_WORK, r.value).owner_user_ids)
    assert sorted(o for seq in sent.values() for o in seq) == sorted(owners)  # each once
    # Windows of 10 and 20 owners, then the 20 left: each sorted, one after the other.
    windows = [owners[:10], owners[10:30], owners[30:]]
    for seq in sent.values():
        assert seq == [o for w in windows for o in sorted(set(w) & set(seq), key=lambda o: o.int)]
    assert len(sent) > 1


async def test_a_run_whose_owners_nobody_does_ends_on_its_budget(
    h: Harness, kafka_bootstrap: str, topic_prefix: str
) -> None:
    await h.apply(*owners_with_documents(3))
    clock = h.runtime.clock
    assert isinstance(clock, ManualClock)
    budget = timedelta(minutes=10)
    run = asyncio.create_task(
        h.run(KafkaFanout(h.runtime.settings)).run_once(
            RunContext.at(SLOT, clock=h.runtime.clock, budget=budget)
        )
    )
    await take(kafka_bootstrap, topic_prefix + OWNER_WORK.name, 3)
    assert not run.done()
    clock.advance(budget)
    result = await asyncio.wait_for(run, 30)
    assert (result.owners_total, result.owners_done, result.reminders_sent) == (3, 0, 0)
    assert result.backlog == 9  # every document still owes its reminder
