"""The fan-out drainer (timer ``automation-fanout``, every instance): the chunks of the
reminder settings' fan-outs that their input's transaction left (planner.py), at most
``chunk_sources`` sources per transaction, each committing its positions, so the input
partition moves on at once and a crash resumes at the last committed chunk.

A transaction takes the fan-outs least recently advanced (up to 16), locks their settings'
BUs first (as every writer of a BU does), then reads their positions and plans chunks of
them in that order up to ``chunk_sources`` sources (``Planner.advance``, as the input's own
transaction does): many small fan-outs share a transaction, a large one gets one chunk and
goes to the back. Two instances on one fan-out take turns; an input that restarts it (a
newer Version of the setting) waits for the transaction or goes first.

A transaction that fails is done again one fan-out at a time; a chunk that fails is counted
on its fan-out with its value-free reason, and the fan-out waits for the next run; ``park_after`` identical failures in a row park it (reason kept,
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
    transactions: int = 0
    chunks: int = 0
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
        """Transactions of up to ``chunk_sources`` sources over the fan-outs least recently
        advanced, until none is left, each failing one is set aside for this run, or the run
        is asked to stop (then ``on_more``: run again right after). A transaction that fails
        is done again one fan-out at a time, so only the failing one is counted."""
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
            if ctx.should_stop():
                stopped = True
                break
            if len(due) > 1:
                try:
                    self._count(await self._advance(due), result)
                    continue
                except Exception:
                    # One fan-out at a time, so that only the failing one is counted.
                    logs.event(
                        log, logging.WARNING, "automation_fanout_group_failed", size=len(due)
                    )
            for one in due:
                if ctx.should_stop():
                    stopped = True
                    break
                try:
                    self._count(await self._advance([one]), result)
                except Exception as exc:
                    failed.add(one[0])
                    await self._failed(one[0], exc, result)
        if stopped and self.on_more is not None:
            self.on_more()
        if result.chunks or result.failed:
            logs.event(log, logging.INFO, "automation_fanout", **result.summary())
        return result

    def _count(self, planned: Planned, result: FanOutResult) -> None:
        result.transactions += 1
        result.chunks += planned.chunks
        result.ensured += len(planned.ensured)
        result.deactivated += planned.deactivated
        if self.on_planned is not None:
            self.on_planned(planned)

    async def _advance(self, due: list[tuple[UUID, UUID | None]]) -> Planned:
        """One transaction: the BUs of ``due`` locked (in BU order, one statement), then
        chunks of those fan-outs in ``due``'s order up to ``chunk_sources`` sources."""
        pool = await self.runtime.pool()
        clock = self.runtime.clock
        started = clock.monotonic()
        async with transaction(pool, plan_for_parameters=True) as conn:
            await units_repo.lock(conn, {u for _, u in due if u is not None})
            now = clock.now()
            current = await settings_repo.changes_get(conn, [g for g, _ in due])
            # A setting whose BU changed since ``due`` was read waits for the next pass.
            here = [g for g, u in due if g not in current or current[g].business_unit_id == u]
            planned = await self.planner.advance(conn, here, now, self.planner.chunk_sources)
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
