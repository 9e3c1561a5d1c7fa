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
    and reused for ``fresh`` seconds while ``stamp()`` is unchanged (something that changes
    what ``make`` would return bumps it): what a page costs under a flood of requests is a
    few runs a second, not one per request. A failure is shared too, and not reused."""

    def __init__(
        self,
        make: Callable[[], Awaitable[T]],
        fresh: float,
        stamp: Callable[[], object] = lambda: None,
    ) -> None:
        self._make = make
        self.fresh = fresh
        self._stamp = stamp
        self._done: tuple[float, object, T] | None = None
        self._running: asyncio.Future[T] | None = None

    async def get(self) -> T:
        done = self._done
        if (
            done is not None
            and time.monotonic() - done[0] < self.fresh
            and done[1] == self._stamp()
        ):
            return done[2]
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._run())
        return await asyncio.shield(self._running)

    async def _run(self) -> T:
        stamp = self._stamp()
        value = await self._make()
        self._done = (time.monotonic(), stamp, value)
        return value
