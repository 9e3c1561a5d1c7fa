"""The input loop acks batches in the order it admitted them, whatever order they finish in.

Why it matters: Faust counts the offsets its fetch loop saw skipped as acked as soon as any
later offset is acked, and commits from one past its committed offset. With two batches in
flight, a second batch acked while the first (say, records re-read after a jump) still waits
for PostgreSQL would let the committed offset pass records not yet processed (CI saw it in
tests/e2e/test_input_gaps.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from devkit.harness.timer_fakes import quiescent
from streams.contracts import TopicContract
from streams.contracts.base import Contract
from streams.input.acks import InOrderAcks
from streams.input.consumer import ContractConsumer, Decoded
from streams.metrics import AgentMetrics


class Item(Contract):
    n: int


CONTRACT = TopicContract("in", Item, lambda m: str(m.n), "in")


class Message:
    def __init__(self, offset: int) -> None:
        self.tp = "in-0"
        self.topic = "in"
        self.partition = 0
        self.offset = offset
        self.key = b"k"
        self.value = b'{"N": %d}' % offset
        self.headers: list[tuple[str, bytes]] = []


class Acks(list[int]):
    """The offsets acked, in order; ``all_in`` is set once ``expected`` of them are."""

    def __init__(self, expected: int = 0) -> None:
        super().__init__()
        self.expected = expected
        self.all_in = asyncio.Event()


class Event:
    def __init__(self, offset: int, acks: Acks) -> None:
        self.message = Message(offset)
        self._acks = acks

    def ack(self) -> None:
        self._acks.append(self.message.offset)
        if len(self._acks) == self._acks.expected:
            self._acks.all_in.set()


class Stream:
    """What ``ContractConsumer.run`` uses of a Faust stream: batches, the app, the topics."""

    def __init__(
        self, batches: list[list[Event]], first_applying: asyncio.Event, finish: asyncio.Event
    ) -> None:
        self._batches = batches
        self._first_applying = first_applying
        self._finish = finish
        consumer = SimpleNamespace(_committed_offset={"in-0": 0}, started=False)
        self.app = SimpleNamespace(
            consumer=consumer,
            consumer_generation_id=1,
            conf=SimpleNamespace(broker_request_timeout=1.0),
        )
        self.channel = SimpleNamespace(topics=("in",))

    def noack(self) -> Stream:
        return self

    async def events(self) -> AsyncIterator[Event]:
        first, *rest = self._batches
        for event in first:
            yield event
        await self._first_applying.wait()  # the rest is read while the first batch applies
        for batch in rest:
            for event in batch:
                yield event
        await self._finish.wait()  # the stream ends once the test has looked


@pytest.mark.parametrize("depth", [1, 2])
async def test_a_batch_that_finishes_first_is_acked_after_the_one_admitted_before_it(
    depth: int,
) -> None:
    acks = Acks(expected=6)
    first_applying = asyncio.Event()
    release_first = asyncio.Event()
    second_applied = asyncio.Event()
    finish = asyncio.Event()

    async def apply(batch: Sequence[Decoded[Item]]) -> None:
        if batch[0].message.n == 0:
            first_applying.set()
            await release_first.wait()
        else:
            second_applied.set()

    first = [Event(o, acks) for o in range(3)]
    second = [Event(o, acks) for o in range(3, 6)]
    consumer = ContractConsumer(
        CONTRACT,
        apply,
        dlq=None,  # type: ignore[arg-type]
        metrics=AgentMetrics(CollectorRegistry()),
        pipeline_depth=depth,
    )
    run = asyncio.create_task(consumer.run(Stream([first, second], first_applying, finish)))  # type: ignore[arg-type]

    if depth == 2:
        # The second batch is applied while the first waits, but not acked before it.
        await asyncio.wait_for(second_applied.wait(), 5)
        await quiescent()
        assert acks == []
    release_first.set()
    await asyncio.wait_for(acks.all_in.wait(), 5)
    assert acks == [0, 1, 2, 3, 4, 5]
    finish.set()
    await asyncio.wait_for(run, 5)


async def test_a_stop_while_the_first_batch_waits_acks_neither() -> None:
    # Both are rolled back or never acked, and delivered again after the restart.
    acks = Acks()
    first_applying = asyncio.Event()
    second_applied = asyncio.Event()

    async def apply(batch: Sequence[Decoded[Item]]) -> None:
        if batch[0].message.n == 0:
            first_applying.set()
            await asyncio.Event().wait()  # PostgreSQL never answers
        second_applied.set()

    consumer = ContractConsumer(
        CONTRACT,
        apply,
        dlq=None,  # type: ignore[arg-type]
        metrics=AgentMetrics(CollectorRegistry()),
        pipeline_depth=2,
    )
    batches = [[Event(0, acks)], [Event(1, acks)]]
    run = asyncio.create_task(consumer.run(Stream(batches, first_applying, asyncio.Event())))  # type: ignore[arg-type]
    await asyncio.wait_for(second_applied.wait(), 5)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert acks == []


def test_batches_are_acked_in_admission_order_as_soon_as_all_before_them_are_handled() -> None:
    acked: list[list[int]] = []
    acks = InOrderAcks(lambda batch: acked.append([e.message.offset for e in batch]))  # type: ignore[attr-defined]
    log = Acks()
    a, b, c = ([Event(o, log)] for o in range(3))
    ta, tb, tc = acks.admit(a), acks.admit(b), acks.admit(c)
    acks.handled(tc)
    acks.handled(tb)
    assert log == [] and acks.waiting == 3
    acks.handled(ta)
    assert log == [0, 1, 2] and acked == [[0], [1], [2]] and acks.waiting == 0
    # A batch never handled (failed, or cancelled at a stop) holds back everything after it.
    d, e = [Event(3, log)], [Event(4, log)]
    acks.admit(d)
    acks.handled(acks.admit(e))
    acks.clear()
    assert log == [0, 1, 2] and acks.waiting == 0
