"""What agents, timers and web views of one worker process share: settings, clock, metrics, database."""

from __future__ import annotations

import asyncio
import os

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

    async def pool(self) -> Pool:
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
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()
