"""Per-owner work of a document expiry run and the two ways it reaches the per-owner worker:
an internal Kafka topic partitioned by OwnerUserId (the worker owning the partition, and its
marks cache, does the owners), or inline in the run itself.

On the topic one work item carries up to OWNERS_PER_ITEM owners that all hash to the item's
partition (``partition_of``, a function of the OwnerUserId alone, so an owner's work always
lands on the same partition as its marks cache value), at a fraction of the records one item
per owner took; the item is sent to that partition explicitly, keyed by its first owner.
The owners go out in OwnerUserId order, a window at a time (``HAND_OUT_FIRST`` ..
``HAND_OUT_MOST``): the scan finds them in ExpiresAt order, all over the key space.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from aiokafka import AIOKafkaProducer
from pydantic import Field, field_validator, model_validator

from streams import tracing
from streams.contracts import DLQ_SUFFIX, TopicContract
from streams.contracts.base import Contract, Instant
from streams.domain.profile import normalize_thresholds
from streams.kafka_client import client_options
from streams.settings import Settings
from streams.timers.slots import iso_utc

# Owners per work item as sent: the consumer applies up to 500 items at once, and a batch
# must stay well under the seconds after which its gap healer reads a quiet partition's
# tail itself (streams/input/consumer.py), so a few owners each (500 items: 4,000 owners).
OWNERS_PER_ITEM = 8
# The most an item may carry (what a consumer accepts).
MAX_OWNERS_PER_ITEM = 500
# Delivery of emitted items is awaited once this many are in flight (bounded memory).
MAX_IN_FLIGHT = 100
# Owners the Kafka fan-out sorts by OwnerUserId before it sends them: the first window, and
# the most (each window is twice the last). The scan finds owners in ExpiresAt order,
# scattered over the key space, and a worker claims the owners of a batch (a few thousand)
# 500 to a transaction: sorted windows make those 500 neighbours in the (OwnerUserId,
# DocumentId) index and the heap, instead of one page each (the claim's PostgreSQL CPU over
# 200,000 owners cut as bench/expiry_parts.py cuts a run's: 2.5% less than unsorted; owners
# in one contiguous range, 6% less). The first window is small, so the workers start at once;
# a window costs the run one sort and HAND_OUT_MOST identifiers of memory.
HAND_OUT_FIRST = 2_000
HAND_OUT_MOST = 32_000


@dataclass(frozen=True, slots=True)
class OwnerWork:
    """One owner's share of one run, as the per-owner worker handles it."""

    work_id: str
    """``name:ownerId:slot``: the owner's identity within the run's slot."""
    run_id: str
    owner_user_id: UUID
    as_of: datetime
    thresholds_days: tuple[int, ...]
    after: UUID | None = None
    """A continuation: the owner's documents up to this DocumentId are claimed already (by
    earlier chunks of this work); None: the owner from its first document."""
    notified: bool = False
    """An earlier chunk of this work sent the owner an event (counted notified once)."""
    owner_key: str = field(default="", compare=False)
    """``str(owner_user_id)``, formatted once: the owner's cache key, its events' aggregate
    id and its log lines' identifier (a run formats 200,000 of them several times each)."""

    def __post_init__(self) -> None:
        if not self.owner_key:
            object.__setattr__(self, "owner_key", str(self.owner_user_id))


@dataclass(frozen=True, slots=True)
class RunOrder:
    """What a run hands out with its owners: the same for every owner of the run."""

    name: str
    run_id: str
    as_of: datetime
    thresholds: tuple[int, ...]
    slot: str = field(default="", compare=False)
    """``iso_utc(as_of)``, computed once: the end of every owner's work id."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "slot", iso_utc(self.as_of))

    def work(self, owner: UUID) -> OwnerWork:
        # fanout_key(name, owner, as_of), the slot formatted once per run (a UUID is never
        # empty and has no ':', which is all fanout_key checks).
        key = str(owner)
        return OwnerWork(
            f"{self.name}:{key}:{self.slot}", self.run_id, owner, self.as_of, self.thresholds,
            owner_key=key,
        )  # fmt: skip


class OwnersWork(Contract):
    """Owners of one partition in one run (internal topic; JSON like every contract)."""

    name: str = Field(min_length=1, max_length=200)
    """The schedule's name: with the owner and AsOf, each owner's work id (name:ownerId:slot)."""
    run_id: str = Field(min_length=1, max_length=64)
    as_of: Instant
    thresholds_days: list[int] = Field(min_length=1, max_length=32)
    owner_user_ids: list[UUID] = Field(min_length=1, max_length=MAX_OWNERS_PER_ITEM)
    # A continuation of one owner claimed in chunks: its documents after this DocumentId are
    # left (absent: every owner from its first document), and whether it was notified.
    after_document_id: UUID | None = None
    notified: bool = False

    @field_validator("thresholds_days")
    @classmethod
    def _thresholds(cls, v: list[int]) -> list[int]:
        return list(normalize_thresholds(v))

    @model_validator(mode="after")
    def _one_owner_continued(self) -> OwnersWork:
        if self.after_document_id is not None and len(self.owner_user_ids) != 1:
            raise ValueError("a continuation (AfterDocumentId) carries exactly one owner")
        return self

    def order(self) -> RunOrder:
        return RunOrder(self.name, self.run_id, self.as_of, tuple(self.thresholds_days))

    def works(self) -> list[OwnerWork]:
        """Each owner's share of the run, a continuation's cursor included."""
        order = self.order()
        if self.after_document_id is None:
            return [order.work(o) for o in self.owner_user_ids]
        work = order.work(self.owner_user_ids[0])
        return [replace(work, after=self.after_document_id, notified=self.notified)]

    @classmethod
    def continuation(cls, work: OwnerWork) -> OwnersWork:
        """The item that goes on with ``work``'s owner after ``work.after``."""
        return cls(
            name=work.work_id.split(f":{work.owner_user_id}:", 1)[0],
            run_id=work.run_id,
            as_of=work.as_of,
            thresholds_days=list(work.thresholds_days),
            owner_user_ids=[work.owner_user_id],
            after_document_id=work.after,
            notified=work.notified,
        )


OWNER_WORK = TopicContract(
    "profile.document-expiry.owner-work.v2",
    OwnersWork,
    lambda m: str(m.owner_user_ids[0]),
    "internal",
)


def _uuid_order(owner: UUID) -> int:
    """The sort key of PostgreSQL's uuid order (its 16 bytes compared as unsigned bytes)."""
    return owner.int


def partition_of(owner: UUID, partitions: int) -> int:
    """The owner's partition: CRC-32 of its 16 bytes, modulo the partitions. The same in
    every process and run, which is all the marks cache needs (an owner's value lives in
    its work items' partition); cheap, unlike Kafka's pure-Python murmur2."""
    return zlib.crc32(owner.bytes) % partitions


def item_key(event: Any) -> str | None:
    """``partition:offset`` of a work item read from Kafka: its identity within its run (the
    run counts each item's progress once); None for one handed over any other way."""
    message = getattr(event, "message", None)
    partition, offset = getattr(message, "partition", None), getattr(message, "offset", None)
    if type(partition) is int and type(offset) is int:
        return f"{partition}:{offset}"
    return None


def owner_item(owner: UUID) -> str:
    """The identity under which the last chunk of a large owner's continuations is counted:
    the owner's, so that two chains of continuations (the record that sent the first
    delivered again) count it done once."""
    return f"owner:{owner}"


class Fanout(Protocol):
    waits: bool
    """True when owners are done elsewhere: the run then waits on its progress row."""

    async def start(self) -> None: ...

    async def send(self, order: RunOrder, owners: Sequence[UUID]) -> None: ...

    async def close(self) -> None: ...


class Continuations(Protocol):
    async def send(self, items: Sequence[tuple[Any, OwnersWork]]) -> None:
        """Each continuation on the partition of the record (event) it continues; returns
        once Kafka has them (the continued record is acked after)."""


class TopicContinuations:
    """Continuations through the app's producer, to the owner-work topic."""

    def __init__(self, topic: Any) -> None:
        self.topic = topic

    async def send(self, items: Sequence[tuple[Any, OwnersWork]]) -> None:
        sent = [
            await self.topic.send(
                key=str(item.owner_user_ids[0]).encode(),
                value=item.to_json(),
                partition=event.message.partition,
            )
            for event, item in items
        ]
        await asyncio.gather(*sent)


class ProcessesInline(Protocol):
    async def process_inline(self, works: Sequence[OwnerWork]) -> object: ...


class InlineFanout:
    """The run does each batch of owners itself with the per-owner worker's code (no cache)."""

    waits = False

    def __init__(self, worker: ProcessesInline) -> None:
        self.worker = worker

    async def start(self) -> None:
        return None

    async def send(self, order: RunOrder, owners: Sequence[UUID]) -> None:
        await self.worker.process_inline([order.work(o) for o in owners])

    async def close(self) -> None:
        return None


class KafkaFanout:
    """Produces work items to the internal topic (created if missing): owners are gathered in
    a window, sorted by OwnerUserId, then per partition and sent OWNERS_PER_ITEM at a time;
    the rest when the run closes the fan-out."""

    waits = True

    def __init__(
        self,
        settings: Settings,
        owners_per_item: int = OWNERS_PER_ITEM,
        window: tuple[int, int] = (HAND_OUT_FIRST, HAND_OUT_MOST),
    ) -> None:
        if not 0 < owners_per_item <= MAX_OWNERS_PER_ITEM:
            raise ValueError(f"owners_per_item must be in 1..{MAX_OWNERS_PER_ITEM}")
        if not 0 < window[0] <= window[1]:
            raise ValueError("window must be (first, most) with 0 < first <= most")
        self.settings = settings
        self.owners_per_item = owners_per_item
        self.window = window
        self.topic = settings.topic(OWNER_WORK.name)
        self._producer: AIOKafkaProducer | None = None
        self._partitions = 0
        self._window: list[UUID] = []
        self._window_size = window[0]
        self._pending: dict[int, list[UUID]] = {}
        self._order: RunOrder | None = None
        self._in_flight: list[asyncio.Future[Any]] = []

    async def start(self) -> None:
        from streams.kafka_admin import ensure_topics

        await ensure_topics(self.settings, [self.topic, self.topic + DLQ_SUFFIX])
        self._producer = AIOKafkaProducer(
            **client_options(self.settings),
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            max_batch_size=256 * 1024,
        )
        await self._producer.start()
        self._partitions = len(await self._producer.partitions_for(self.topic))

    async def send(self, order: RunOrder, owners: Sequence[UUID]) -> None:
        if self._producer is None:
            raise RuntimeError("KafkaFanout.send before start")
        if self._order is not None and order != self._order:
            await self._flush()  # one run per fan-out; a new one starts with empty buffers
        self._order = order
        self._window.extend(owners)
        if len(self._window) >= self._window_size:
            await self._hand_out(order)

    async def _hand_out(self, order: RunOrder) -> None:
        """The window's owners, in OwnerUserId order (PostgreSQL's uuid order), to their
        partitions' items; the next window is twice as large, up to the most."""
        owners, self._window = self._window, []
        owners.sort(key=_uuid_order)
        self._window_size = min(self.window[1], 2 * self._window_size)
        n = self._partitions
        for owner in owners:
            partition = partition_of(owner, n)
            pending = self._pending.setdefault(partition, [])
            pending.append(owner)
            if len(pending) >= self.owners_per_item:
                await self._emit(order, partition, pending)
                pending.clear()
                if len(self._in_flight) >= MAX_IN_FLIGHT:
                    await self._delivered()

    async def _emit(self, order: RunOrder, partition: int, owners: list[UUID]) -> None:
        assert self._producer is not None
        item = OwnersWork(
            name=order.name,
            run_id=order.run_id,
            as_of=order.as_of,
            thresholds_days=list(order.thresholds),
            owner_user_ids=list(owners),
        )
        # On the partition every owner of it hashes to (the key, its first owner, only
        # labels it: the partition is given).
        self._in_flight.append(
            await self._producer.send(
                self.topic,
                item.to_json(),
                key=str(owners[0]).encode(),
                partition=partition,
                # The run's traceparent, so the per-owner worker's batch continues its trace.
                headers=tracing.kafka_headers() or None,
            )
        )

    async def _flush(self) -> None:
        order = self._order
        if order is None:
            return
        if self._window:
            await self._hand_out(order)
        pending, self._pending = self._pending, {}
        self._window_size = self.window[0]  # the next run starts with a small window again
        for partition, owners in pending.items():
            if owners:
                await self._emit(order, partition, owners)

    async def _delivered(self) -> None:
        pending, self._in_flight = self._in_flight, []
        await asyncio.gather(*pending)

    async def close(self) -> None:
        producer = self._producer
        if producer is None:
            return
        try:
            await self._flush()
            await self._delivered()
        finally:
            self._producer, self._order = None, None
            await producer.stop()
