"""The worker's timer registry: its PostgreSQL store (db/timers.py on the runtime's pool) and
the shared maintenance jobs.

Slices declare their own schedules on the same registry when they install themselves
(streams/slices/*/__init__.py), before it starts: every timer goes through this one registry.
"""

from __future__ import annotations

from db.timers import TimerRepository
from streams.maintenance import maintenance_schedules
from streams.maintenance.schedules import check_retention_budget
from streams.runtime import Runtime
from streams.timers.registry import TimerRegistry


def build_registry(runtime: Runtime, worker_id: str | None = None) -> TimerRegistry:
    """The worker's registry with the maintenance jobs declared; raises RegistrationError on
    bad settings. Slices add theirs before ``start()``."""
    from streams.timers.metrics import TimerMetrics

    store = TimerRepository(open_db=runtime.pool)
    registry = TimerRegistry(
        store=store,
        clock=runtime.clock,
        metrics=TimerMetrics(runtime.metrics.registry),
        worker_id=worker_id,
        pauses=store,
    )

    registry.register_all(maintenance_schedules(runtime, store, registry.worker_id))
    check_retention_budget(registry, runtime.settings)
    return registry
