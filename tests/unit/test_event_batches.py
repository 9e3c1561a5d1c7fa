"""Input batches gather while earlier ones are applied (streams/input/batches.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from devkit.harness.timer_fakes import quiescent
from streams.input.batches import EventBatches


class Source:
    """An event source the test feeds; it ends when told to, or raises."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[int | BaseException | None] = asyncio.Queue()
        self.read = 0

    def put(self, *events: int) -> None:
        for e in events:
            self.queue.put_nowait(e)

    async def events(self) -> AsyncIterator[int]:
        while True:
            item = await self.queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            self.read += 1
            yield item


async def test_events_that_arrive_while_nobody_asks_are_read_and_come_as_full_batches() -> None:
    source = Source()
    batches = EventBatches(source.events(), size=3, within=60)
    source.put(1, 2, 3)
    assert await anext(batches) == [1, 2, 3]  # the reader runs from the first ask on
    source.put(*range(4, 10))
    await quiescent()
    assert source.read == 9  # read although no batch was asked for
    assert await anext(batches) == [4, 5, 6]
    assert await anext(batches) == [7, 8, 9]
    await batches.aclose()


async def test_a_partial_batch_is_ready_once_its_first_event_waited_within() -> None:
    now = [100.0]
    source = Source()
    batches = EventBatches(source.events(), size=10, within=60, clock=lambda: now[0])
    taking = asyncio.ensure_future(anext(batches))
    source.put(1, 2)
    await quiescent()
    assert not taking.done()
    now[0] += 61  # the first event has waited longer than `within`
    source.put(3)  # any arrival re-checks the deadline
    assert await asyncio.wait_for(taking, 5) == [1, 2, 3]
    await batches.aclose()


async def test_the_reader_pauses_at_the_limit_and_resumes_when_a_batch_is_taken() -> None:
    source = Source()
    batches = EventBatches(source.events(), size=2, within=60, limit=4)
    source.put(*range(10))
    assert await anext(batches) == [0, 1]
    await quiescent()
    assert source.read == 6  # 2 taken + 4 buffered, then it waits for room
    assert await anext(batches) == [2, 3]
    await quiescent()
    assert source.read == 8
    await batches.aclose()


async def test_the_end_of_the_stream_flushes_what_is_left_then_stops() -> None:
    source = Source()
    batches = EventBatches(source.events(), size=5, within=60)
    source.put(1, 2, None)
    assert [b async for b in batches] == [[1, 2]]


async def test_an_error_of_the_stream_reaches_the_consumer_after_what_was_read() -> None:
    source = Source()
    batches = EventBatches(source.events(), size=5, within=60)
    source.put(1, RuntimeError("consumer stopped"))
    assert await anext(batches) == [1]
    with pytest.raises(RuntimeError, match="consumer stopped"):
        await anext(batches)


def test_bad_sizes_are_refused() -> None:
    async def nothing() -> AsyncIterator[int]:
        return
        yield

    with pytest.raises(ValueError):
        EventBatches(nothing(), size=0, within=1)
