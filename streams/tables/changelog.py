"""Sending a cache table's changelog: the records of one batched write in producer
batches, one batch per partition (more when a batch fills), with the sends of successive
writes kept in order in the background (``OrderedSends``). What Kafka acknowledged is
handed back to the cache (streams/tables/cache.py), the one module that writes the local
store's persisted offsets.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from faust.types import TableT

from streams import logs
from streams.faust_compat import changelog_producer

log = logging.getLogger("streams.tables")

# Encoded (key, value) records per changelog partition.
Records = dict[int, list[tuple[bytes, bytes]]]
# (topic, partition, records in the batch) -> the batch's delivery callback.
OnDelivered = Callable[[str, int, int], Callable[[asyncio.Future[Any]], None]]


async def send_changelog(
    table: TableT[Any, Any], records: Records, on_delivered: OnDelivered
) -> None:
    """One producer batch per partition (more when a batch fills), the persisted offset set
    when Kafka acknowledges each (``on_delivered(topic, partition, count)`` gives the
    callback that sets it)."""
    topic = table.changelog_topic.get_topic_name()
    producer = changelog_producer(table.app.producer)
    for partition, pending in records.items():
        while pending:
            batch = producer.create_batch()
            taken = 0
            for k, v in pending:
                if batch.append(key=k, value=v, timestamp=None) is None:
                    break
                taken += 1
            if taken == 0:  # one record larger than a batch: Faust's own path sends it
                k, v = pending[0]
                await table.app.producer.send(topic, k, v, partition, None, None)
                pending = pending[1:]
                continue
            batch.close()
            delivered = await producer.send_batch(batch, topic, partition=partition)
            delivered.add_done_callback(on_delivered(topic, partition, taken))
            pending = pending[taken:]


class OrderedSends:
    """Runs submitted sends one after another in the background; ``submit`` waits only when
    ``limit`` are already queued (Kafka slower than the caller)."""

    def __init__(self, name: str, limit: int = 8) -> None:
        self.name = name
        self.limit = limit
        self._queue: deque[asyncio.Task[None]] = deque()

    async def submit(self, send: Callable[[], Awaitable[None]]) -> None:
        while self._queue and self._queue[0].done():
            self._queue.popleft()
        if len(self._queue) >= self.limit:
            await asyncio.gather(self._queue.popleft(), return_exceptions=True)
        previous = self._queue[-1] if self._queue else None
        self._queue.append(asyncio.create_task(self._after(previous, send)))

    async def drain(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) for every submitted send to end."""
        if self._queue:
            await asyncio.wait(list(self._queue), timeout=timeout)

    async def _after(
        self, previous: asyncio.Task[None] | None, send: Callable[[], Awaitable[None]]
    ) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        try:
            await send()
        except Exception as exc:
            # A lost changelog batch leaves the cache behind the database after a move or a
            # restart; the applier checks what a cache says against the stored rows.
            logs.event(log, logging.WARNING, "changelog_send_failed", table=self.name, error=exc)
