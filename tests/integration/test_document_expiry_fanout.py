"""The run's per-owner fan-out through real Kafka: one work item per owner on the internal
topic, keyed by OwnerUserId with the identity name:ownerId:slot; the run waits for the
per-owner workers on its progress row, and ends on its budget when nobody does them."""

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

from devkit.kafka import read_to_end
from streams.agents.consumer import Decoded
from streams.clock import ManualClock
from streams.contracts import decode
from streams.slices.profile.work import OWNER_WORK, WORK_ID_HEADER, KafkaFanout
from streams.timers.slots import fanout_key
from tests.support.profile import SLOT, Harness, items, person_document, reminder_events

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
    bootstrap: str, topic: str, count: int, timeout: float = 30.0
) -> list[ConsumerRecord[bytes, bytes]]:
    """Records of ``topic`` from its start until ``count`` arrived (fails on the deadline)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    out: list[ConsumerRecord[bytes, bytes]] = []
    try:
        deadline = time.monotonic() + timeout
        while len(out) < count:
            assert time.monotonic() < deadline, f"{len(out)} of {count} work items in {timeout}s"
            for records in (await consumer.getmany(timeout_ms=200)).values():
                out.extend(records)
    finally:
        await consumer.stop()
    return out


async def test_each_owner_is_one_work_item_keyed_by_owner_and_the_run_waits_for_them(
    h: Harness, kafka_bootstrap: str, topic_prefix: str
) -> None:
    docs = owners_with_documents(12)
    await h.apply(*docs)
    owners = {d["OwnerUserId"] for d in docs}
    fanout = KafkaFanout(h.runtime.settings)
    # Batches of 5 documents: owners show up in several and are still handed out once.
    run = asyncio.create_task(h.run(fanout, batch_size=5).run_once(SLOT))
    topic = topic_prefix + OWNER_WORK.name
    records = await take(kafka_bootstrap, topic, len(owners))
    assert not run.done()  # it waits for the owners to be done
    works = []
    for r in records:
        work = decode(OWNER_WORK, r.value)
        assert r.key is not None and r.key.decode() == str(work.owner_user_id)
        assert dict(r.headers)[WORK_ID_HEADER].decode() == work.work_id
        assert work.work_id == fanout_key("document-expiry", work.owner_user_id, SLOT)
        assert (work.as_of, work.thresholds_days) == (SLOT, [30, 7, 1, 0])
        works.append(Decoded(MagicMock(), work))
    # The per-owner worker, as its agent applies a batch.
    await h.owners(works)
    result = await asyncio.wait_for(run, 30)
    assert {str(w.message.owner_user_id) for w in works} == owners
    assert (result.owners_total, result.owners_done, result.owners_notified) == (12, 12, 12)
    assert (
        result.reminders_sent
        == len(docs)
        == len(items(await reminder_events(await h.runtime.pool())))
    )
    # Exactly one item per owner on the topic, each owner's on one partition.
    on_topic = await read_to_end(kafka_bootstrap, topic)
    assert sorted(r.key for r in on_topic) == sorted(str(o).encode() for o in owners)
    assert len({r.partition for r in on_topic}) > 1  # spread by key over the 4 partitions


async def test_a_run_whose_owners_nobody_does_ends_on_its_budget(
    h: Harness, kafka_bootstrap: str, topic_prefix: str
) -> None:
    await h.apply(*owners_with_documents(3))
    clock = h.runtime.clock
    assert isinstance(clock, ManualClock)
    budget = timedelta(minutes=10)
    run = asyncio.create_task(
        h.run(KafkaFanout(h.runtime.settings), max_duration=budget).run_once(SLOT)
    )
    await take(kafka_bootstrap, topic_prefix + OWNER_WORK.name, 3)
    assert not run.done()
    clock.advance(budget)
    result = await asyncio.wait_for(run, 30)
    assert (result.owners_total, result.owners_done, result.reminders_sent) == (3, 0, 0)
    assert result.backlog == 9  # every document still owes its reminder
