"""The fan-out drainer (timer ``automation-fanout``, every instance): the chunks of the
reminder settings' fan-outs that their input's transaction left (planner.py), one chunk per
transaction, each committing its position, so the input partition moves on at once and a
crash resumes at the last committed chunk.

A chunk takes the lock of its setting's BU first (as every writer of the BU does), then
reads the fan-out's position: two instances on one fan-out take turns, and an input that
restarts it (a newer Version of the setting) waits for the chunk or goes first.

A chunk that fails is counted on its fan-out with its value-free reason, and the fan-out
waits for the next run; ``park_after`` identical failures in a row park it (reason kept,
``automation_fanout_parked``), and the other fan-outs go on. A database that is down fails
the count as well: the run fails and the timer tries again, nothing is parked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any
from uuid import UUID

from db import business_units as units_repo
from db import fanout_progress as progress_repo
from db import reminder_settings as settings_repo
from db.connector import transaction
from streams import faults, logs
from streams.errors import describe
from streams.runtime import Runtime
from streams.slices.automation.planner import Planned, Planner
from streams.timers.context import RunContext

log = logging.getLogger("streams.slices.automation.fanout")

NEXT_BATCH = 16


@dataclass
class FanOutResult:
    run_id: str
    chunks: int = 0
    finished: int = 0
    failed: int = 0
    parked: int = 0
    ensured: int = 0
    deactivated: int = 0

    def summary(self) -> dict[str, Any]:
        return asdict(self)


class FanOutDrainer:
    def __init__(
        self,
        runtime: Runtime,
        planner: Planner,
        *,
        park_after: int = 5,
        on_planned: Callable[[Planned], None] | None = None,
        on_more: Callable[[], None] | None = None,
    ) -> None:
        self.runtime = runtime
        self.planner = planner
        self.park_after = park_after
        self.on_planned = on_planned
        self.on_more = on_more
        self.longest_chunk_seconds = 0.0

    async def run_once(self, ctx: RunContext) -> FanOutResult:
        """Chunks until no fan-out is left, each failing one is set aside for this run, or
        the run is asked to stop (then ``on_more``: run again right after)."""
        result = FanOutResult(run_id=ctx.run_id)
        pool = await self.runtime.pool()
        failed: set[UUID] = set()
        stopped = False
        while not stopped:
            async with transaction(pool) as conn:
                due = await progress_repo.next_due(conn, NEXT_BATCH + len(failed))
            due = [(g, u) for g, u in due if g not in failed]
            if not due:
                break
            for guid, unit in due:
                if ctx.should_stop():
                    stopped = True
                    break
                try:
                    planned = await self._chunk(guid, unit)
                except Exception as exc:
                    failed.add(guid)
                    await self._failed(guid, exc, result)
                    continue
                result.chunks += planned.chunks
                if planned.chunks and not planned.unfinished:
                    result.finished += 1
                result.ensured += len(planned.ensured)
                result.deactivated += planned.deactivated
                if self.on_planned is not None:
                    self.on_planned(planned)
        if stopped and self.on_more is not None:
            self.on_more()
        if result.chunks or result.failed:
            logs.event(log, logging.INFO, "automation_fanout", **result.summary())
        return result

    async def _chunk(self, guid: UUID, unit: UUID | None) -> Planned:
        pool = await self.runtime.pool()
        clock = self.runtime.clock
        started = clock.monotonic()
        async with transaction(pool, plan_for_parameters=True) as conn:
            if unit is not None:
                await units_repo.lock(conn, [unit])
            now = clock.now()
            current = await settings_repo.changes_get(conn, [guid])
            moved = guid in current and current[guid].business_unit_id != unit
            if moved:
                return Planned(unfinished=1)  # its BU changed meanwhile: the next pass locks it
            progress = await progress_repo.get(conn, [guid])
            if not progress or progress[0].parked_on is not None:
                return Planned()  # finished or restarted by another instance, or parked
            planned, _, left = await self.planner.setting_chunk(
                conn, progress[0], now, self.planner.chunk_sources
            )
            planned.unfinished = left is not None
        self.longest_chunk_seconds = max(self.longest_chunk_seconds, clock.monotonic() - started)
        faults.hit("automation_fanout.after_chunk")
        return planned

    async def _failed(self, guid: UUID, exc: Exception, result: FanOutResult) -> None:
        reason = describe(exc)
        pool = await self.runtime.pool()
        now = self.runtime.clock.now()
        async with transaction(pool) as conn:
            counted = await progress_repo.failed(conn, guid, reason, self.park_after, now)
        result.failed += 1
        failures, parked = counted if counted is not None else (0, None)
        logs.event(
            log,
            logging.ERROR if parked else logging.WARNING,
            "automation_fanout_parked" if parked else "automation_fanout_chunk_failed",
            setting_guid=guid,
            failures=failures,
            reason=reason,
        )
        result.parked += parked is not None
