"""A timer handler built on its first run from the worker's pool (which needs the running loop)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from db.connector import Pool
from streams.runtime import Runtime
from streams.timers.context import RunContext
from streams.timers.schedule import Handler


class OnPool:
    """A handler built on first run from the worker's pool (declared before the pool exists)."""

    def __init__(self, runtime: Runtime, build: Callable[[Pool], Handler]) -> None:
        self.runtime = runtime
        self.build = build
        self._handler: Handler | None = None

    async def run_once(self, ctx: RunContext) -> Any:
        if self._handler is None:
            self._handler = self.build(await self.runtime.pool())
        return await self._handler.run_once(ctx)
