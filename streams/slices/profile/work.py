"""Per-owner work items of a document expiry run and the two ways they reach the per-owner
worker: an internal Kafka topic keyed by OwnerUserId (the worker owning that partition, and
its marks cache, does the owner), or inline in the run itself."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol
from uuid import UUID

from aiokafka import AIOKafkaProducer
from pydantic import Field, field_validator

from streams.contracts import DLQ_SUFFIX, TopicContract
from streams.contracts.base import Contract, Instant
from streams.domain.profile import normalize_thresholds
from streams.settings import Settings

WORK_ID_HEADER = "work-id"
# Delivery of emitted items is awaited once this many are in flight (bounded memory).
MAX_IN_FLIGHT = 5_000


class OwnerWork(Contract):
    """One owner's share of one run (internal topic; JSON like every contract)."""

    work_id: str = Field(min_length=1, max_length=300)
    """``name:ownerId:slot``: the owner's identity within the run's slot."""
    run_id: str = Field(min_length=1, max_length=64)
    owner_user_id: UUID
    as_of: Instant
    thresholds_days: list[int] = Field(min_length=1, max_length=32)

    @field_validator("thresholds_days")
    @classmethod
    def _thresholds(cls, v: list[int]) -> list[int]:
        return list(normalize_thresholds(v))


OWNER_WORK = TopicContract(
    "profile.document-expiry.owner-work.v1", OwnerWork, lambda m: str(m.owner_user_id), "internal"
)


class Fanout(Protocol):
    waits: bool
    """True when owners are done elsewhere: the run then waits on its progress row."""

    async def start(self) -> None: ...

    async def send(self, works: Sequence[OwnerWork]) -> None: ...

    async def close(self) -> None: ...


class ProcessesInline(Protocol):
    async def process_inline(self, works: Sequence[OwnerWork]) -> object: ...


class InlineFanout:
    """The run does each batch of owners itself with the per-owner worker's code (no cache)."""

    waits = False

    def __init__(self, worker: ProcessesInline) -> None:
        self.worker = worker

    async def start(self) -> None:
        return None

    async def send(self, works: Sequence[OwnerWork]) -> None:
        await self.worker.process_inline(works)

    async def close(self) -> None:
        return None


class KafkaFanout:
    """Produces work items to the internal topic (created if missing), keyed by OwnerUserId."""

    waits = True

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = settings.topic(OWNER_WORK.name)
        self._producer: AIOKafkaProducer | None = None
        self._in_flight: list[asyncio.Future[Any]] = []

    async def start(self) -> None:
        from streams.kafka_admin import ensure_topics

        await ensure_topics(self.settings, [self.topic, self.topic + DLQ_SUFFIX])
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            max_batch_size=256 * 1024,
        )
        await self._producer.start()

    async def send(self, works: Sequence[OwnerWork]) -> None:
        producer = self._producer
        if producer is None:
            raise RuntimeError("KafkaFanout.send before start")
        for work in works:
            self._in_flight.append(
                await producer.send(
                    self.topic,
                    work.to_json(),
                    key=str(work.owner_user_id).encode(),
                    headers=[(WORK_ID_HEADER, work.work_id.encode())],
                )
            )
        if len(self._in_flight) >= MAX_IN_FLIGHT:
            await self._delivered()

    async def _delivered(self) -> None:
        pending, self._in_flight = self._in_flight, []
        await asyncio.gather(*pending)

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            await self._delivered()
        finally:
            await producer.stop()
