"""The /status "retention" section: every pruned table, its horizon and its last run."""

from __future__ import annotations

from typing import Any

from streams.maintenance.metrics import TABLES as ALL_TABLES
from streams.maintenance.metrics import RetentionMetrics
from streams.maintenance.outbox_retention import OUTBOX_TABLE
from streams.maintenance.slot_prune import SLOTS
from streams.maintenance.table_retention import TableRetentionConfig
from streams.runtime import Runtime


def retention_status(runtime: Runtime) -> list[dict[str, Any]]:
    """One row per table: horizon, rows deleted by this worker's runs, and the last run here
    (a cluster-once job runs on one worker a slot; the others show what they ran)."""
    settings = runtime.settings
    metrics = runtime.metrics.family(RetentionMetrics)
    horizons = {
        OUTBOX_TABLE: f"published over {settings.outbox_retention_hours:g} h ago",
        **TableRetentionConfig.from_settings(settings).horizons(),
        SLOTS: f"slot older than {settings.timer_slot_retention_days:g} d",
    }
    rows = []
    for table in ALL_TABLES:
        deleted = runtime.metrics.registry.get_sample_value(
            "reminders_retention_deleted_rows_total", {"table": table}
        )
        rows.append(
            {
                "table": table,
                "horizon": horizons[table],
                "deleted": int(deleted or 0),
                **{"last_run": None, "last_deleted": None, "last_rows_per_second": None},
                **{"last_batches": None, "more": None},
                **metrics.last(table),
            }
        )
    return rows
