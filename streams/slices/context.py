"""What a slice's stream part is installed on (its ``install_stream``): the worker's Faust app,
the runtime, the topics, the timer registry, and helpers that wire an input, a cache table,
a page or a status section the same way every time. Its timers get ``TimerContext``
(streams/slices/slice.py), which needs no Faust."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import faust
from faust.types import StreamT
from faust.web import Request, Response, View

from db.connector import connection, ping
from streams.contracts import Contract, TopicContract
from streams.input.consumer import ContractConsumer, Decoded
from streams.kafka_client import topic_config
from streams.runtime import Runtime
from streams.tables.cache import KeyCache
from streams.timer_process.supervisor import TimerProcess
from streams.timers.registry import TimerRegistry
from streams.topics import Topics

M = TypeVar("M", bound=Contract)


@dataclass
class SliceContext:
    app: faust.App
    runtime: Runtime
    topics: Topics
    registry: TimerRegistry
    consumers: dict[str, ContractConsumer[Any]] = field(default_factory=dict)
    """Agent name → its consumer (health and /status read their progress and DLQ counts)."""
    caches: list[KeyCache] = field(default_factory=list)
    status_sections: dict[str, Callable[[], Any]] = field(default_factory=dict)
    """Extra /status sections: name → a function returning JSON-able data (or an awaitable
    of it, for a section that reads PostgreSQL)."""
    pages: dict[str, Callable[[View, Request], Awaitable[Response]]] = field(default_factory=dict)
    """Web routes added by slices: path → handler (registered on the app's web server)."""
    on_started: list[Callable[[], None]] = field(default_factory=list)
    """Called once the worker's services run (e.g. catch up on what came due while down)."""
    timer_process: TimerProcess | None = None
    """The worker's timer process (runs the isolated schedules and the relay), if it has one."""

    def cache_table(self, name: str, help: str) -> KeyCache:
        """A changelog-backed table (RocksDB, JSON keys and values) used as a per-key cache
        in front of PostgreSQL, counted and shown on /status."""
        table = self.app.Table(
            name,
            default=None,
            partitions=self.runtime.settings.topic_partitions,
            schema=faust.Schema(key_serializer="json", value_serializer="json"),
            help=help,
            extra_topic_configs=topic_config(self.runtime.settings),
        )
        cache = KeyCache(table, self.runtime.metrics.agents)
        self.caches.append(cache)
        return cache

    def input(
        self,
        agent_name: str,
        contract: TopicContract[M],
        apply: Callable[[Sequence[Decoded[M]]], Awaitable[object]],
        *,
        pipeline_depth: int = 1,
    ) -> ContractConsumer[M]:
        """An agent on ``contract``'s topic with the shared loop: batch, decode, dead-letter
        bad messages, ``apply`` the rest, ack after the commit. One agent instance
        (concurrency 1); by default one batch at a time, so messages apply in order.
        ``pipeline_depth`` 2 lets the next batch be applied while one waits for PostgreSQL:
        only for an ``apply`` that any order leaves correct (Version-guarded state, as the
        recipe's applier), since a later batch may then commit first."""
        consumer = ContractConsumer(
            contract,
            apply,
            self.topics.dlq_of(contract),
            self.runtime.metrics.agents,
            pipeline_depth=pipeline_depth,
            agent=agent_name,
            same_failure_attempts=self.runtime.settings.input_same_failure_attempts,
            healthy=self._database_answers,
        )

        async def run(stream: StreamT[Any]) -> None:
            await consumer.run(stream)

        run.__name__ = run.__qualname__ = agent_name.replace("-", "_")
        self.app.agent(self.topics.input(contract), name=agent_name, concurrency=1)(run)

        def forget_revoked(_app: Any, /, *args: Any, signal: Any, **_: Any) -> None:
            # What this worker reached on a partition is no position once another worker
            # may take it over (its stall check would read a handed-back partition as lag).
            consumer.progress.revoked(args[0])

        self.app.on_partitions_revoked.connect(forget_revoked)
        self.consumers[agent_name] = consumer
        return consumer

    async def _database_answers(self) -> bool:
        """PostgreSQL answers a statement now (an input's repeated failure is its own)."""
        try:
            pool = await asyncio.wait_for(self.runtime.pool(), timeout=5)
            async with connection(pool, timeout=5) as conn:
                await ping(conn, timeout=5)
        except Exception:
            return False
        return True

    def status(self, name: str, section: Callable[[], Any]) -> None:
        self.status_sections[name] = section

    def page(self, path: str, handler: Callable[[View, Request], Awaitable[Response]]) -> None:
        """A web route of the slice (e.g. a support view), served beside /status."""
        if path in self.pages:
            raise ValueError(f"web path {path!r} is already registered by a slice")
        self.pages[path] = handler
        self.app.page(path)(handler)
