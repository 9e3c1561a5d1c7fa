"""The worker's timer registry: its PostgreSQL store and the shared maintenance jobs.

Slices declare their own schedules on the same registry when they install themselves
(streams/slices/*/__init__.py), before it starts: every timer goes through this one registry.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from db.timers import TimerRepository
from streams.maintenance import maintenance_schedules
from streams.maintenance.schedules import check_retention_budget
from streams.runtime import Runtime
from streams.timers.registry import TimerRegistry


class RuntimeTimerStore:
    """The registry's store on the worker's lazily created pool (the pool needs the running loop)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def _repo(self) -> TimerRepository:
        return TimerRepository(await self.runtime.pool())

    async def last_slots(self, names: Sequence[str]) -> dict[str, datetime]:
        return await (await self._repo()).last_slots(names)

    async def claim_slot(
        self,
        name: str,
        slot: datetime,
        claimed_by: str,
        run_id: str,
        lease_expires_at: datetime | None = None,
    ) -> bool:
        repo = await self._repo()
        return await repo.claim_slot(name, slot, claimed_by, run_id, lease_expires_at)

    async def reclaim_slot(
        self,
        name: str,
        slot: datetime,
        claimed_by: str,
        run_id: str,
        lease_expires_at: datetime,
        now: datetime,
        *,
        released: bool = False,
    ) -> bool:
        repo = await self._repo()
        return await repo.reclaim_slot(
            name, slot, claimed_by, run_id, lease_expires_at, now, released=released
        )

    async def unfinished_slots(
        self, name: str, since: datetime, limit: int
    ) -> list[tuple[datetime, datetime]]:
        return await (await self._repo()).unfinished_slots(name, since, limit)

    async def advance_state(self, name: str, slot: datetime, worker: str) -> None:
        await (await self._repo()).advance_state(name, slot, worker)

    async def give_up_released(self, name: str, before: datetime) -> list[datetime]:
        return await (await self._repo()).give_up_released(name, before)

    async def slot_attempts(self, name: str, slot: datetime, run_id: str) -> int | None:
        return await (await self._repo()).slot_attempts(name, slot, run_id)

    async def finish_slot(
        self,
        name: str,
        slot: datetime,
        run_id: str,
        result: str,
        duration_seconds: float,
        error: str | None = None,
    ) -> bool:
        repo = await self._repo()
        return await repo.finish_slot(name, slot, run_id, result, duration_seconds, error)

    async def release_slot(
        self,
        name: str,
        slot: datetime,
        run_id: str,
        result: str,
        duration_seconds: float,
        next_attempt_at: datetime,
        *,
        counted: bool,
        error: str | None,
    ) -> bool:
        repo = await self._repo()
        return await repo.release_slot(
            name,
            slot,
            run_id,
            result,
            duration_seconds,
            next_attempt_at,
            counted=counted,
            error=error,
        )

    async def prune_slots(self, before: datetime, limit: int) -> int:
        return await (await self._repo()).prune_slots(before, limit)


def build_registry(runtime: Runtime, worker_id: str | None = None) -> TimerRegistry:
    """The worker's registry with the maintenance jobs declared; raises RegistrationError on
    bad settings. Slices add theirs before ``start()``."""
    from streams.timers.metrics import TimerMetrics

    store = RuntimeTimerStore(runtime)
    registry = TimerRegistry(
        store=store,
        clock=runtime.clock,
        metrics=TimerMetrics(runtime.metrics.registry),
        worker_id=worker_id,
    )

    registry.register_all(maintenance_schedules(runtime, store, registry.worker_id))
    check_retention_budget(registry, runtime.settings)
    return registry
