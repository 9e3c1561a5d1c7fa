"""Small asyncio helpers shared by the background services (relay, listener, registry)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Generic, TypeVar

from streams.errors import describe

__all__ = ["Shared", "describe", "in_flight", "wait_any"]

T = TypeVar("T")


async def wait_any(*events: asyncio.Event, within: float | None) -> None:
    """Return when any event is set or after ``within`` seconds."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


async def in_flight(jobs: Sequence[Coroutine[Any, Any, T]], limit: int) -> list[T]:
    """The jobs' results in order, at most ``limit`` running at once; the first failure
    cancels the rest (a transaction cancelled mid-way rolls back) and is raised as is."""
    gate = asyncio.Semaphore(limit)

    async def gated(job: Coroutine[Any, Any, T]) -> T:
        async with gate:
            return await job

    tasks = [asyncio.ensure_future(gated(job)) for job in jobs]
    if not tasks:
        return []
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        # Only a failure (or our own cancellation) leaves tasks unfinished.
        if not all(task.done() for task in tasks):
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for job in jobs:
                job.close()  # the ones never started (closing a finished one does nothing)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
    return [task.result() for task in tasks]


class Shared(Generic[T]):
    """One run of ``make`` at a time, its result shared by every caller that asks meanwhile
    and reused for ``fresh`` seconds: what a page costs under a flood of requests is one run a
    second, not one per request. A failure is shared too, and not reused."""

    def __init__(self, make: Callable[[], Awaitable[T]], fresh: float) -> None:
        self._make = make
        self.fresh = fresh
        self._done: tuple[float, T] | None = None
        self._running: asyncio.Future[T] | None = None

    async def get(self) -> T:
        if self._done is not None and time.monotonic() - self._done[0] < self.fresh:
            return self._done[1]
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._run())
        return await asyncio.shield(self._running)

    async def _run(self) -> T:
        value = await self._make()
        self._done = (time.monotonic(), value)
        return value
