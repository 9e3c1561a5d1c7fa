"""Every periodic job of a worker, declared in this one place through the timer registry."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from db.timers import TimerRepository
from streams.maintenance import maintenance_schedules
from streams.runtime import Runtime
from streams.timers.calendar_dispatch import CalendarReminderDispatcher, DispatchConfig
from streams.timers.registry import TimerRegistry
from streams.timers.schedule import Mode, Schedule

CALENDAR_DISPATCH = "calendar-dispatch"
# Dispatch runs need DueAt < AsOf (strict), so a precise wake-up comes just after DueAt.
WAKE_NUDGE = timedelta(milliseconds=2)


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
    ) -> bool:
        repo = await self._repo()
        return await repo.reclaim_slot(name, slot, claimed_by, run_id, lease_expires_at, now)

    async def unfinished_slots(
        self, name: str, since: datetime, limit: int
    ) -> list[tuple[datetime, datetime]]:
        return await (await self._repo()).unfinished_slots(name, since, limit)

    async def advance_state(self, name: str, slot: datetime, worker: str) -> None:
        await (await self._repo()).advance_state(name, slot, worker)

    async def finish_slot(
        self, name: str, slot: datetime, run_id: str, result: str, duration_seconds: float
    ) -> bool:
        repo = await self._repo()
        return await repo.finish_slot(name, slot, run_id, result, duration_seconds)

    async def prune_slots(self, before: datetime, limit: int) -> int:
        return await (await self._repo()).prune_slots(before, limit)


def dispatch_waker(registry: TimerRegistry) -> Callable[[datetime], None]:
    """Wake the calendar dispatcher right after ``due_at`` (sub-second lateness; the 60 s
    cycle remains the safety net). Used by the dispatcher itself and the events agent."""

    def wake(due_at: datetime) -> None:
        registry.wake(CALENDAR_DISPATCH, at=due_at + WAKE_NUDGE)

    return wake


def build_registry(runtime: Runtime) -> TimerRegistry:
    """The worker's registry with every job declared; raises RegistrationError on bad settings."""
    from streams.timers.metrics import TimerMetrics

    store = RuntimeTimerStore(runtime)
    registry = TimerRegistry(
        store=store, clock=runtime.clock, metrics=TimerMetrics(runtime.metrics.registry)
    )

    dispatcher = CalendarReminderDispatcher(
        runtime,
        DispatchConfig(),
        on_next_due=dispatch_waker(registry),
        should_stop=lambda: registry.stopping,
    )
    registry.register_all(
        [
            Schedule(
                name=CALENDAR_DISPATCH,
                interval=timedelta(seconds=60),
                handler=dispatcher,
                max_duration=timedelta(seconds=30),
                mode=Mode.EVERY_INSTANCE,
                settings_prefix="TIMER_CALENDAR_DISPATCH_",
            ),
            *maintenance_schedules(runtime, store),
        ]
    )
    # One budget: the dispatcher drains for as long as the schedule's (possibly overridden)
    # max duration allows, and stops between batches before the registry would cancel it.
    dispatcher.config = replace(
        dispatcher.config, max_duration=registry.get(CALENDAR_DISPATCH).max_duration
    )
    return registry
