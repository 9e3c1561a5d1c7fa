"""The maintenance schedules every worker declares: outbox retention, slot pruning, and the
worker heartbeat that lets each status page list the others."""

from __future__ import annotations

from datetime import timedelta

from streams.maintenance.heartbeat import Heartbeat
from streams.maintenance.outbox_retention import OutboxRetention, RetentionConfig
from streams.maintenance.slot_prune import SlotPruner
from streams.runtime import Runtime
from streams.timers.on_pool import OnPool
from streams.timers.ports import TimerStore
from streams.timers.schedule import Misfire, Mode, Schedule

OUTBOX_RETENTION = "outbox-retention"
TIMER_SLOT_PRUNE = "timer-slot-prune"
WORKER_HEARTBEAT = "worker-heartbeat"


def maintenance_schedules(
    runtime: Runtime, store: TimerStore, worker_id: str = "worker"
) -> list[Schedule]:
    """Cluster-once housekeeping: one run per slot across the workers, missed slots coalesced."""
    return [
        Schedule(
            name=OUTBOX_RETENTION,
            interval=timedelta(hours=1),
            handler=OnPool(
                runtime,
                lambda pool: OutboxRetention(
                    pool,
                    metrics=runtime.metrics.outbox,
                    config=RetentionConfig.from_settings(runtime.settings),
                ),
            ),
            max_duration=timedelta(minutes=5),
            mode=Mode.CLUSTER_ONCE,
            misfire=Misfire.COALESCE,
            settings_prefix="TIMER_OUTBOX_RETENTION_",
        ),
        Schedule(
            name=TIMER_SLOT_PRUNE,
            cron="17 3 * * *",
            handler=SlotPruner(store),
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
