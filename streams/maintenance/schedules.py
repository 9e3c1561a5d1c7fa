"""The maintenance schedules every worker declares: outbox retention, table retention, slot
pruning, and the worker heartbeat that lets each status page list the others."""

from __future__ import annotations

from datetime import timedelta

from streams.maintenance.heartbeat import Heartbeat
from streams.maintenance.metrics import RetentionMetrics
from streams.maintenance.outbox_retention import OutboxRetention, RetentionConfig
from streams.maintenance.slot_prune import SlotPruner
from streams.maintenance.table_retention import TableRetention, TableRetentionConfig
from streams.runtime import Runtime
from streams.settings import Settings
from streams.timers.on_pool import OnPool
from streams.timers.ports import TimerStore
from streams.timers.registry import TimerRegistry
from streams.timers.schedule import Misfire, Mode, RegistrationError, Schedule

OUTBOX_RETENTION = "outbox-retention"
TABLE_RETENTION = "table-retention"
TIMER_SLOT_PRUNE = "timer-slot-prune"
WORKER_HEARTBEAT = "worker-heartbeat"


def maintenance_schedules(
    runtime: Runtime, store: TimerStore, worker_id: str = "worker"
) -> list[Schedule]:
    """Cluster-once housekeeping: one run per slot across the workers, missed slots coalesced."""
    settings = runtime.settings
    metrics = runtime.metrics.family(RetentionMetrics)
    budget = timedelta(seconds=settings.retention_budget_seconds)
    # Built here, not on the first run: bad retention settings stop the worker at start-up.
    outbox_config = RetentionConfig.from_settings(settings)
    table_config = TableRetentionConfig.from_settings(settings)
    return [
        Schedule(
            name=OUTBOX_RETENTION,
            interval=timedelta(hours=1),
            handler=OnPool(
                runtime,
                lambda pool: OutboxRetention(
                    pool,
                    metrics=runtime.metrics.outbox,
                    config=outbox_config,
                    clock=runtime.clock,
                    retention_metrics=metrics,
                ),
            ),
            max_duration=timedelta(minutes=5),
            mode=Mode.CLUSTER_ONCE,
            misfire=Misfire.COALESCE,
            settings_prefix="TIMER_OUTBOX_RETENTION_",
        ),
        Schedule(
            name=TABLE_RETENTION,
            interval=timedelta(hours=1),
            handler=OnPool(
                runtime,
                lambda pool: TableRetention(
                    pool,
                    metrics=metrics,
                    config=table_config,
                    clock=runtime.clock,
                ),
            ),
            max_duration=timedelta(minutes=5),
            mode=Mode.CLUSTER_ONCE,
            misfire=Misfire.COALESCE,
            settings_prefix="TIMER_TABLE_RETENTION_",
        ),
        Schedule(
            name=TIMER_SLOT_PRUNE,
            cron="17 3 * * *",
            handler=SlotPruner(
                store,
                timedelta(days=settings.timer_slot_retention_days),
                metrics=metrics,
                budget=budget,
                clock=runtime.clock,
            ),
            max_duration=timedelta(minutes=5),
            mode=Mode.CLUSTER_ONCE,
            misfire=Misfire.COALESCE,
            settings_prefix="TIMER_SLOT_PRUNE_",
        ),
        Schedule(
            name=WORKER_HEARTBEAT,
            interval=timedelta(seconds=10),
            handler=Heartbeat(runtime, worker_id),
            max_duration=timedelta(seconds=5),
            mode=Mode.EVERY_INSTANCE,
            settings_prefix="TIMER_WORKER_HEARTBEAT_",
        ),
    ]


def check_retention_budget(registry: TimerRegistry, settings: Settings) -> None:
    """RETENTION_BUDGET_SECONDS must end a run before its schedule's max duration cancels it
    (a cancelled run rolls back the batch it is in); RegistrationError naming both."""
    budget = timedelta(seconds=settings.retention_budget_seconds)
    for name in (OUTBOX_RETENTION, TABLE_RETENTION, TIMER_SLOT_PRUNE):
        spec = registry.get(name)
        if budget >= spec.max_duration:
            raise RegistrationError(
                name,
                "RETENTION_BUDGET_SECONDS",
                f"{settings.retention_budget_seconds:g} s must be less than "
                f"{spec.settings_prefix}MAX_DURATION_SECONDS "
                f"({spec.max_duration.total_seconds():g} s)",
            )
