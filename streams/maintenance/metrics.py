"""Retention's metric family: rows deleted per table, and what each table's last run did."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from streams.maintenance.drain import Drained

TABLES = (
    "ops.outbox",
    "calendar.events",
    "calendar.event_reminders",
    "calendar.event_tombstones",
    "automation.scheduler",
    "ops.timer_slots",
)
"""Every table retention prunes, in the order /status lists them."""


class RetentionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.deleted = Counter(
            "reminders_retention_deleted_rows_total",
            "Rows deleted by retention, by table (past their configured horizon)",
            ["table"],
            registry=registry,
        )
        self.last_deleted = Gauge(
            "reminders_retention_last_run_deleted_rows",
            "Rows the table's last retention run deleted",
            ["table"],
            registry=registry,
        )
        self.last_rate = Gauge(
            "reminders_retention_last_run_rows_per_second",
            "Deleted rows per second of the table's last retention run",
            ["table"],
            registry=registry,
        )
        self.last_run = Gauge(
            "reminders_retention_last_run_timestamp_seconds",
            "AsOf of the table's last retention run (Unix seconds)",
            ["table"],
            registry=registry,
        )
        self.more = Gauge(
            "reminders_retention_more",
            "1 when the table's last retention run ran out of budget with rows left",
            ["table"],
            registry=registry,
        )
        self._last: dict[str, dict[str, Any]] = {}
        for table in TABLES:  # every table's series exists from the start (rules, dashboards)
            self.deleted.labels(table)
            self.more.labels(table)

    def record(self, table: str, done: Drained, as_of: datetime) -> None:
        self.deleted.labels(table).inc(done.rows)
        self.last_deleted.labels(table).set(done.rows)
        self.last_rate.labels(table).set(done.rows_per_second)
        self.last_run.labels(table).set(as_of.timestamp())
        self.more.labels(table).set(1 if done.more else 0)
        self._last[table] = {
            "last_run": as_of.isoformat(),
            "last_deleted": done.rows,
            "last_batches": done.batches,
            "last_rows_per_second": round(done.rows_per_second),
            "more": done.more,
        }

    def last(self, table: str) -> dict[str, Any]:
        """What /status shows of the table's last run in this worker (empty before one)."""
        return dict(self._last.get(table, {}))
