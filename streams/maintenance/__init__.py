"""Maintenance jobs run by the timer registry: outbox retention and timer slot pruning."""

from streams.maintenance.outbox_retention import OutboxRetention, RetentionConfig, RetentionResult
from streams.maintenance.schedules import maintenance_schedules
from streams.maintenance.slot_prune import PruneResult, SlotPruner

__all__ = [
    "OutboxRetention",
    "PruneResult",
    "RetentionConfig",
    "RetentionResult",
    "SlotPruner",
    "maintenance_schedules",
]
