"""Offsets that never reached the stream: read them from the broker, in order (self-healing input).

Why: with a changelog-backed table, faust-streaming 0.15 can lose fetched records in the
worker during the recovery that follows a rebalance (records discarded between fetch and
delivery while the flow is toggled; reproduced here about one time in two when a worker
is killed mid-stream and another takes over). The stream then sees offsets jump
(…, 40, 68, …). Faust does not protect the commit against that: its fetch loop sees the
same jump and marks 41..67 as a "gap" it may commit over (that is how it steps over
transaction markers), so once 68 is acked the committed offset passes records that were
never processed (measured: tests/e2e/test_input_gaps.py).

So the batch loop (``ContractConsumer.run``) hands every record to ``GapHealer.admit``
first. When the partition's offset jumps past the one expected, the healer reads the
skipped range straight from the broker with a consumer of its own (no group, manual
assignment, same isolation level as Faust's) and returns the records found there ahead
of the record that revealed the jump. They are processed in offset order in the same
batch and acked with it, so no record after the jump is acked - and Faust cannot commit
past the first missing offset - before the missing records are applied.

A skipped offset that holds no record (a transaction's commit marker, a compacted or
expired record) is the common case on a transactional input and costs one broker read at
most: a read returns everything up to the fetch size, and what it showed (which offsets
hold records) answers later jumps in that range without another read.

Expectations start from the offset Faust committed for the partition (0 when nothing was
committed), so records lost before the first one a new assignment delivers are caught too.

Two Faust internals are used, through streams/faust_compat: the committed offset per
partition (``committed_offsets``) and a fetched record as a Faust message whose ack feeds
Faust's commit bookkeeping (``to_message``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError, OffsetOutOfRangeError
from aiokafka.structs import ConsumerRecord, TopicPartition
from faust.types import AppT, EventT

from streams import logs
from streams.errors import SafeMessage
from streams.faust_compat import committed_offsets, to_message
from streams.metrics import AgentMetrics

log = logging.getLogger("streams.input.gaps")

P = TypeVar("P")  # a partition identifier (faust TP in production, anything hashable in tests)
R = TypeVar("R")  # a record read from the broker


class GapReadError(SafeMessage, Exception):
    """A broker read did not cover the gap (retried like an unreachable broker)."""


# What a failed read raises when the broker is away or slow: retried, never skipped.
# Anything else is a bug and propagates.
RETRIED = (KafkaError, OSError, TimeoutError, GapReadError)


@dataclass(frozen=True)
class Gap(Generic[P]):
    """Offsets ``start`` .. ``end - 1`` of ``partition`` never reached the stream."""

    partition: P
    start: int
    end: int


class GapGuard(Generic[P]):
    """Per-partition expectation of the next offset; pure bookkeeping, no I/O."""

    def __init__(self) -> None:
        self._next: dict[P, int] = {}
        self.gaps_detected = 0

    def reset(self) -> None:
        """Forget expectations (after a rebalance positions restart from committed offsets)."""
        self._next.clear()

    def expect(self, partition: P, offset: int | None) -> None:
        """Start expecting ``offset`` (the committed one) unless ``partition`` was seen already."""
        if offset is not None and partition not in self._next:
            self._next[partition] = offset

    def next_offset(self, partition: P) -> int | None:
        return self._next.get(partition)

    def advance(self, partition: P, offset: int) -> None:
        """Everything below ``offset`` was handled (a tail read from the broker)."""
        self._next[partition] = max(offset, self._next.get(partition, offset))

    def admit(self, partition: P, offset: int) -> Gap[P] | None:
        """Record ``offset`` as delivered; the offsets it skipped, if any.

        The caller processes the skipped records (if the broker has any) before this one.
        """
        expected = self._next.get(partition)
        self._next[partition] = offset + 1
        if expected is None or offset <= expected:
            # First sight, the next one, or a replay (rewind to committed offsets).
            return None
        self.gaps_detected += 1
        return Gap(partition, expected, offset)


# fetch(partition, start, end): the records at offsets >= start, and the fetch position
# reached (>= end: every offset below it that holds a record is in the list).
Fetch = Callable[[P, int, int], Awaitable[tuple[Sequence[R], int]]]


@dataclass(frozen=True)
class _Window:
    start: int
    end: int  # exclusive
    present: frozenset[int]  # offsets in [start, end) that hold a record


class GapFiller(Generic[P, R]):
    """Finds the records of a gap on the broker, remembering what each read showed.

    One read covers as many offsets as the broker returns at once (one fetch), so a
    run of small holes (a commit marker after every transaction) costs one read, and a
    gap whose offsets all lack a record is answered from memory when it can be.
    """

    def __init__(self, fetch: Fetch[P, R], offset_of: Callable[[R], int]) -> None:
        self._fetch = fetch
        self._offset_of = offset_of
        self._windows: dict[P, _Window] = {}
        self.reads = 0

    def reset(self) -> None:
        self._windows.clear()

    async def missing(self, gap: Gap[P]) -> list[R]:
        """The records that exist on the broker at offsets ``gap.start`` .. ``gap.end - 1``."""
        window = self._windows.get(gap.partition)
        if (
            window is not None
            and window.start <= gap.start
            and gap.end <= window.end
            and not any(gap.start <= o < gap.end for o in window.present)
        ):
            return []
        records, position = await self._fetch(gap.partition, gap.start, gap.end)
        self.reads += 1
        if position < gap.end:
            raise GapReadError(f"broker read stopped at {position}, before {gap.end}")
        offsets = [self._offset_of(r) for r in records]
        self._windows[gap.partition] = _Window(
            gap.start, position, frozenset(o for o in offsets if gap.start <= o < position)
        )
        return [r for r, o in zip(records, offsets, strict=True) if gap.start <= o < gap.end]


class KafkaGapReader:
    """Reads a range of a partition with a consumer of its own (no group, manual assignment).

    Created cheaply; connects on the first read. Same brokers, credentials and isolation
    level as the app's consumer, so it sees the records (and only those) the stream would.
    """

    def __init__(self, consumer_factory: Callable[[], AIOKafkaConsumer], timeout: float) -> None:
        self._factory = consumer_factory
        self._timeout = timeout
        self._consumer: AIOKafkaConsumer | None = None

    @classmethod
    def for_app(cls, app: AppT) -> KafkaGapReader:
        from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth, server_list

        conf = app.conf
        committed_only = bool(getattr(app.consumer, "in_transaction", False))

        def factory() -> AIOKafkaConsumer:
            return AIOKafkaConsumer(
                bootstrap_servers=server_list(conf.broker, 9092),
                client_id=f"{conf.broker_client_id}-gap-reader",
                group_id=None,
                enable_auto_commit=False,
                # A start below the log start offset is reported, not silently moved.
                auto_offset_reset="none",
                isolation_level="read_committed" if committed_only else "read_uncommitted",
                max_partition_fetch_bytes=conf.consumer_max_fetch_size,
                request_timeout_ms=int(conf.broker_request_timeout * 1000.0),
                check_crcs=conf.broker_check_crcs,
                **credentials_to_aiokafka_auth(conf.broker_credentials, conf.ssl_context),
            )

        return cls(factory, timeout=float(conf.broker_request_timeout))

    async def fetch(
        self, tp: TopicPartition, start: int, end: int
    ) -> tuple[list[ConsumerRecord[Any, Any]], int]:
        consumer = self._consumer
        if consumer is None:
            consumer = self._factory()
            await consumer.start()
            self._consumer = consumer
        partition = TopicPartition(tp.topic, tp.partition)
        consumer.assign([partition])
        consumer.seek(partition, start)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        records: list[ConsumerRecord[Any, Any]] = []
        while True:
            try:
                batch = await consumer.getmany(partition, timeout_ms=500)
            except OffsetOutOfRangeError:
                # Records below the log start are gone (retention): nothing to read there.
                first = (await consumer.beginning_offsets([partition]))[partition]
                if first <= start:
                    raise
                start = first
                if start >= end:
                    return records, start
                consumer.seek(partition, start)
                continue
            records.extend(batch.get(partition, []))
            position = await consumer.position(partition)
            if position >= end:
                return records, position
            if loop.time() > deadline:
                raise TimeoutError(f"read of {tp.topic}[{tp.partition}] stuck at {position}")

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()


class GapHealer:
    """What ``ContractConsumer.run`` calls per record: the records to process, in order.

    ``admit(event)`` returns ``[event]``, or - after a jump - the records of the skipped
    offsets read from the broker (as Faust events of the same topic, acked like any other)
    followed by ``event``. A broker read that fails because Kafka is away or slow is retried
    with backoff until it works: the partition waits (as it does for PostgreSQL), it never
    skips.
    """

    def __init__(
        self,
        app: AppT,
        guard: GapGuard[Any],
        *,
        metrics: AgentMetrics,
        label: str,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        reader: KafkaGapReader | None = None,
        retry_first: float = 0.2,
        retry_max: float = 10.0,
    ) -> None:
        self.app = app
        self.guard = guard
        self.label = label
        self._metrics = metrics
        self._sleep = sleep
        self.reader = reader or KafkaGapReader.for_app(app)
        self.filler: GapFiller[Any, ConsumerRecord[Any, Any]] = GapFiller(
            self.reader.fetch, lambda r: int(r.offset)
        )
        self._retry = (retry_first, retry_max)
        self._generation: object = None

    def new_batch(self) -> None:
        """Call before each batch: a rebalance restarts positions from committed offsets."""
        generation = self.app.consumer_generation_id
        if generation != self._generation:
            self._generation = generation
            self.guard.reset()
            self.filler.reset()

    def _committed(self, tp: Any) -> int:
        # Faust's own record of the partition's committed offset (set when the assignment
        # seeks to it, then at every commit). Faust keeps None for "nothing committed" (and
        # for a committed 0): the partition then starts at its beginning, so offset 0 is
        # expected - otherwise a first record lost at a takeover would go unnoticed, and
        # Faust, with no committed offset to hold it back, would commit past it. Below the
        # log start (retention) the read finds nothing: one hole, no records.
        offset = committed_offsets(self.app.consumer).get(tp)
        return offset if isinstance(offset, int) and offset > 0 else 0

    async def admit(self, event: EventT[Any]) -> list[EventT[Any]]:
        message = event.message
        tp = message.tp
        if self.guard.next_offset(tp) is None:
            self._first_record(message, self._committed(tp))
        self.guard.expect(tp, self._committed(tp))
        gap = self.guard.admit(tp, message.offset)
        if gap is None:
            return [event]
        reads = self.filler.reads
        records = await self._read(gap)
        reads = self.filler.reads - reads
        if records:
            logs.event(
                log,
                logging.WARNING,
                "gap_filled",
                topic=message.topic,
                partition=message.partition,
                from_offset=gap.start,
                to_offset=gap.end - 1,
                records=len(records),
                reads=reads,
            )
        else:
            logs.event(
                log,
                logging.DEBUG,
                "offset_hole",
                topic=message.topic,
                partition=message.partition,
                from_offset=gap.start,
                to_offset=gap.end - 1,
                reads=reads,
            )
        if reads:
            self._metrics.gap_reads.labels(self.label).inc(reads)
        if records:
            self._metrics.gaps.labels(self.label).inc()
        else:
            self._metrics.offset_holes.labels(self.label).inc()
        return [*self._events(tp, records), event]

    def _first_record(self, message: Any, committed: int) -> None:
        # The partition's first record in this generation (after an assignment): when a
        # moved partition is consumed again (bench/recovery.py reads it from the log).
        logs.event(
            log,
            logging.INFO,
            "partition_first_record",
            topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            committed=committed,
            generation=self._generation,
        )

    def expected(self, tp: Any) -> int:
        """The next offset the stream should deliver on ``tp``."""
        self.guard.expect(tp, self._committed(tp))
        found = self.guard.next_offset(tp)
        return found if found is not None else 0

    async def tail(self, tp: Any, highwater: int) -> list[EventT[Any]]:
        """The records from the expected offset up to ``highwater`` that never reached the
        stream, read from the broker; the expectation moves to ``highwater``."""
        expected = self.expected(tp)
        if highwater <= expected:
            return []
        records = await self._read(Gap(tp, expected, highwater))
        self.guard.advance(tp, highwater)
        if not records:
            return []
        logs.event(
            log,
            logging.WARNING,
            "gap_filled",
            topic=self.label,
            partition=getattr(tp, "partition", tp),
            from_offset=expected,
            to_offset=highwater - 1,
            records=len(records),
            tail=True,
        )
        self._metrics.gaps.labels(self.label).inc()
        return self._events(tp, records)

    def _events(self, tp: Any, records: Sequence[ConsumerRecord[Any, Any]]) -> list[EventT[Any]]:
        consumer = self.app.consumer
        events: list[EventT[Any]] = []
        for record in records:
            msg = to_message(consumer, tp, record)
            events.append(self.app.create_event(msg.key, msg.value, msg.headers, msg))
        return events

    async def _read(self, gap: Gap[Any]) -> list[ConsumerRecord[Any, Any]]:
        delay, most = self._retry
        while True:
            try:
                return await self.filler.missing(gap)
            except RETRIED as exc:
                logs.event(
                    log,
                    logging.WARNING,
                    "gap_read_retry",
                    topic=self.label,
                    partition=getattr(gap.partition, "partition", gap.partition),
                    from_offset=gap.start,
                    error=type(exc).__name__,
                    delay_s=delay,
                )
                await self._sleep(delay)
                delay = min(delay * 2, most)

    async def close(self) -> None:
        await self.reader.close()
