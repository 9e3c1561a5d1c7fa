"""Batches of input events, gathered while the previous batches are being applied.

Faust's ``Stream.noack_take`` stops reading while the batch it yielded is held: its buffer is
released only when the consumer asks for the next batch. The input loop asks for a batch once
a slot is free (two batches in flight at most), so with ``noack_take`` nothing would be read
while both slots are busy, and each new batch would then wait for its events to trickle in
(short batches, and a free slot waiting for one: the ingest benchmark, docs/benchmarks.md).

``EventBatches`` reads the stream in a task of its own into a bounded buffer, so events
gather while batches are applied: under load a free slot finds a full batch at once. A
batch is ready when ``size`` events are buffered or when its first event has waited
``within`` seconds (bounded latency when the input is quiet). Beyond ``limit`` buffered
events the reader pauses; Faust's own stream queue and flow control hold what comes next.
Events are not acked here (the input loop acks them once handled).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Generic, TypeVar

E = TypeVar("E")


class EventBatches(Generic[E]):
    def __init__(
        self,
        events: AsyncIterator[E],
        size: int,
        within: float,
        limit: int | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if size < 1 or within < 0:
            raise ValueError("size must be >= 1 and within >= 0")
        self._events = events
        self.size = size
        self.within = within
        self.limit = max(limit or 2 * size, size)
        self._clock = clock
        self._buffer: list[E] = []
        self._first_at = 0.0  # when the oldest buffered event arrived
        self._changed = asyncio.Event()  # set on every arrival and at the end
        self._room = asyncio.Event()
        self._room.set()
        self._ended = False
        self._error: BaseException | None = None
        self._reader: asyncio.Task[None] | None = None

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    async def _read(self) -> None:
        buffer = self._buffer
        try:
            async for event in self._events:
                if not buffer:
                    self._first_at = self._now()
                buffer.append(event)
                self._changed.set()
                if len(buffer) >= self.limit:
                    self._room.clear()
                    await self._room.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # handed to the consumer: the agent fails, as with Faust
            self._error = exc
        finally:
            self._ended = True
            self._changed.set()

    def __aiter__(self) -> EventBatches[E]:
        return self

    async def __anext__(self) -> list[E]:
        if self._reader is None:
            self._reader = asyncio.create_task(self._read())
        while True:
            buffer = self._buffer
            if len(buffer) >= self.size or (buffer and self._ended):
                return self._take()
            if not buffer:
                if self._ended:
                    if self._error is not None:
                        raise self._error
                    raise StopAsyncIteration
                wait: float | None = None
            else:
                wait = self._first_at + self.within - self._now()
                if wait <= 0:
                    return self._take()
            self._changed.clear()
            if wait is None:
                await self._changed.wait()
            else:
                try:
                    await asyncio.wait_for(self._changed.wait(), wait)
                except TimeoutError:
                    return self._take()

    def _take(self) -> list[E]:
        batch = self._buffer[: self.size]
        del self._buffer[: self.size]
        # What is left arrived after the first taken event: ``_first_at`` stays, so it is
        # ready at once (under load, the sooner the better).
        self._room.set()
        return batch

    async def aclose(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
