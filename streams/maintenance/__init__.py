"""Maintenance jobs run by the timer registry: retention (outbox, tables, timer slots) and the
worker heartbeat."""

from streams.maintenance.drain import Drained, drain
from streams.maintenance.metrics import RetentionMetrics
from streams.maintenance.outbox_retention import OutboxRetention, RetentionConfig, RetentionResult
from streams.maintenance.schedules import maintenance_schedules
from streams.maintenance.slot_prune import PruneResult, SlotPruner
from streams.maintenance.table_retention import (
    TableRetention,
    TableRetentionConfig,
    TableRetentionResult,
)

__all__ = [
    "Drained",
    "OutboxRetention",
    "PruneResult",
    "RetentionConfig",
    "RetentionMetrics",
    "RetentionResult",
    "SlotPruner",
    "TableRetention",
    "TableRetentionConfig",
    "TableRetentionResult",
    "drain",
    "maintenance_schedules",
]
