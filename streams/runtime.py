"""What agents, timers and web views of one worker process share: settings, clock, metrics, database.

Two pools: the worker's (agents, timers, console actions) and the read pages' own (small,
read-only sessions with a server-side statement_timeout). ``pool()`` returns the read pool
while a read request is served (``reading()``, entered by streams/web/guard.py for every
read page), so every repository call a page makes, however deep, stays off the worker's
connections; ``worker_pool()`` is the worker's whatever the context (``/health``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from db.connector import Pool, SessionLimits, create_pool
from streams import clock_sync
from streams.clock import Clock, DatabaseClock
from streams.connection_budget import plan
from streams.metrics import Metrics
from streams.settings import Settings


class Runtime:
    def __init__(
        self, settings: Settings, *, metrics: Metrics | None = None, clock: Clock | None = None
    ) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        # Production runs on the database's time (DatabaseClock, read when the pool opens);
        # tests inject a clock of their own (ManualClock), which is used as it is.
        self.clock: Clock = clock or DatabaseClock()
        self._pool: Pool | None = None
        self._pool_lock = asyncio.Lock()
        self._clock_sync: asyncio.Task[None] | None = None
        self._read_pool: Pool | None = None
        self._read_lock = asyncio.Lock()
        self._closing: list[Callable[[], Awaitable[None]]] = []
        self.generation = 0
        """Bumped by every action served over the web (streams/web/guard.py): the pages'
        shared snapshots made before it are not reused."""

    def on_close(self, close: Callable[[], Awaitable[None]]) -> None:
        """Call ``close`` when the runtime closes, before its pools (kept clients of a page)."""
        self._closing.append(close)

    async def pool(self) -> Pool:
        """The pool for this context: the read pages' inside ``reading()``, else the worker's."""
        if _READING.get():
            return await self.read_pool()
        return await self.worker_pool()

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Inside, ``pool()`` is the read pool (tasks started inside inherit it)."""
        token = _READING.set(True)
        try:
            yield
        finally:
            _READING.reset(token)

    async def read_pool(self) -> Pool:
        """The read pages' pool (WEB_READ_POOL_SIZE), created on first read."""
        if self._read_pool is None:
            async with self._read_lock:
                if self._read_pool is None:
                    self._read_pool = await create_pool(
                        self.settings.database_url,
                        min_size=0,
                        max_size=self.settings.web_read_pool_size,
                        limits=SessionLimits(
                            lock_timeout_seconds=self.settings.db_lock_timeout_seconds,
                            idle_in_transaction_seconds=(
                                self.settings.db_idle_in_transaction_timeout_seconds
                            ),
                            statement_timeout_seconds=(
                                self.settings.web_read_statement_timeout_seconds
                            ),
                            read_only=True,
                        ),
                        application_name=f"{self.settings.app_id}:{os.getpid()}:read",
                    )
        return self._read_pool

    async def worker_pool(self) -> Pool:
        """The worker's connection pool, created on first use (agents may start before services)."""
        if self._pool is None:
            async with self._pool_lock:
                if self._pool is None:
                    pool = await create_pool(
                        self.settings.database_url,
                        min_size=min(self.settings.db_pool_min_size, plan(self.settings).pool_size),
                        max_size=plan(self.settings).pool_size,
                        limits=self.session_limits(),
                        application_name=f"{self.settings.app_id}:{os.getpid()}",
                        on_statement=self.metrics.db.statements.inc,
                    )
                    if isinstance(self.clock, DatabaseClock):
                        await self._start_clock(pool, self.clock)
                    self._pool = pool
        return self._pool

    async def _start_clock(self, pool: Pool, clock: DatabaseClock) -> None:
        """The first reading of the database's clock before anyone can use the pool (and so
        the time), then one every CLOCK_SYNC_INTERVAL_SECONDS."""
        try:
            await clock_sync.read(pool, clock, self.metrics)
        except BaseException:
            await pool.close()
            raise
        self._clock_sync = asyncio.create_task(
            clock_sync.keep_synced(
                pool,
                clock,
                self.metrics,
                interval=self.settings.clock_sync_interval_seconds,
                bound=self.settings.clock_skew_max_seconds,
            ),
            name="clock-sync",
        )

    def clock_problem(self) -> str | None:
        """Why this process's own clock is too far from the database's (readiness), or None."""
        if isinstance(self.clock, DatabaseClock):
            return clock_sync.skew_problem(self.clock, self.settings.clock_skew_max_seconds)
        return None

    def session_limits(self) -> SessionLimits:
        return SessionLimits(
            lock_timeout_seconds=self.settings.db_lock_timeout_seconds,
            idle_in_transaction_seconds=self.settings.db_idle_in_transaction_timeout_seconds,
        )

    async def close(self) -> None:
        if self._clock_sync is not None:
            task, self._clock_sync = self._clock_sync, None
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for close in self._closing:
            await close()
        if self._read_pool is not None:
            read, self._read_pool = self._read_pool, None
            await read.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()


_READING: ContextVar[bool] = ContextVar("streams_reading", default=False)
