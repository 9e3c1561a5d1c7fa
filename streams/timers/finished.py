"""The registry's "run finished" signal: a count of ended runs per schedule, with waiters."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from streams.timers.runs import RunRecord


class RunsFinished:
    """Told every RunRecord as its run ends; tells subscribers and wakes the waiters whose
    count of ended runs is reached."""

    def __init__(self) -> None:
        self._subscribers: list[Callable[[RunRecord], None]] = []
        self._counts: dict[str, int] = {}
        self._last: dict[str, RunRecord] = {}
        self._waiters: list[tuple[str, int, asyncio.Future[RunRecord]]] = []

    def subscribe(self, callback: Callable[[RunRecord], None]) -> None:
        self._subscribers.append(callback)

    def count(self, name: str) -> int:
        return self._counts.get(name, 0)

    async def wait(self, name: str, count: int | None = None) -> RunRecord:
        """Until ``count`` runs of ``name`` in all have ended (default: one more than now);
        returns the latest record. A count already reached returns at once, so taking
        ``count(name)`` before the trigger and waiting for one more cannot miss a run that
        ends in between."""
        target = self.count(name) + 1 if count is None else count
        if target < 1:
            raise ValueError(f"count must be >= 1, got {target}")
        if self.count(name) >= target:
            return self._last[name]
        future: asyncio.Future[RunRecord] = asyncio.get_running_loop().create_future()
        waiter = (name, target, future)
        self._waiters.append(waiter)
        try:
            return await future
        finally:
            self._waiters.remove(waiter)

    def ended(self, record: RunRecord) -> None:
        name = record.schedule
        done = self._counts[name] = self.count(name) + 1
        self._last[name] = record
        for waiting, target, future in self._waiters:
            if waiting == name and done >= target and not future.done():
                future.set_result(record)
        for callback in self._subscribers:
            callback(record)
