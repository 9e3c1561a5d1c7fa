"""What agents, timers and web views of one worker process share: settings, clock, metrics, database."""

from __future__ import annotations

import asyncio
import os

from db.connector import Pool, SessionLimits, create_pool
from streams.clock import Clock, SystemClock
from streams.connection_budget import plan
from streams.metrics import Metrics
from streams.settings import Settings


class Runtime:
    def __init__(
        self, settings: Settings, *, metrics: Metrics | None = None, clock: Clock | None = None
    ) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.clock: Clock = clock or SystemClock()
        self._pool: Pool | None = None
        self._pool_lock = asyncio.Lock()

    async def pool(self) -> Pool:
        """The worker's connection pool, created on first use (agents may start before services)."""
        if self._pool is None:
            async with self._pool_lock:
                if self._pool is None:
                    self._pool = await create_pool(
                        self.settings.database_url,
                        min_size=min(self.settings.db_pool_min_size, plan(self.settings).pool_size),
                        max_size=plan(self.settings).pool_size,
                        limits=self.session_limits(),
                        application_name=f"{self.settings.app_id}:{os.getpid()}",
                        on_statement=self.metrics.db.statements.inc,
                    )
        return self._pool

    def session_limits(self) -> SessionLimits:
        return SessionLimits(
            lock_timeout_seconds=self.settings.db_lock_timeout_seconds,
            idle_in_transaction_seconds=self.settings.db_idle_in_transaction_timeout_seconds,
        )

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()
