"""The maintenance schedules every worker declares: outbox retention and slot pruning."""

from __future__ import annotations

from datetime import timedelta

from streams.maintenance.outbox_retention import OutboxRetention, RetentionConfig
from streams.maintenance.slot_prune import SlotPruner
from streams.runtime import Runtime
from streams.timers.on_pool import OnPool
from streams.timers.ports import TimerStore
from streams.timers.schedule import Misfire, Mode, Schedule

OUTBOX_RETENTION = "outbox-retention"
TIMER_SLOT_PRUNE = "timer-slot-prune"


def maintenance_schedules(runtime: Runtime, store: TimerStore) -> list[Schedule]:
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
    ]
