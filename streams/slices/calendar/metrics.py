"""Metrics of the calendar slice; names fixed by seed 000 (ReminderDispatchJob)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from streams.metrics import LATENCY_BUCKETS, LATENESS_BUCKETS


class CalendarDispatchMetrics:
    """Dispatch run metrics, created once per worker (``runtime.metrics.family``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.cycle_duration = Histogram(
            "calendar_reminder_dispatch_cycle_duration_seconds",
            "Duration of one dispatch run (all its batches)",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.items = Counter(
            "calendar_reminder_dispatch_items_total",
            "Reminder rows dispatched, by result (sent, skipped)",
            ["result"],
            registry=registry,
        )
        self.backlog = Gauge(
            "calendar_reminder_dispatch_backlog",
            "Pending reminders already due (DueAt < now) after the last run",
            registry=registry,
        )
        self.backing_off = Gauge(
            "calendar_reminder_dispatch_backing_off",
            "Due Pending reminders waiting for their retry time after failed attempts (poison)",
            registry=registry,
        )
        self.oldest_due_age = Gauge(
            "calendar_reminder_dispatch_oldest_due_age_seconds",
            "How long the oldest Pending reminder has been due after the last run (0 when none)",
            registry=registry,
        )
        self.lateness = Histogram(
            "calendar_reminder_dispatch_lateness_seconds",
            "SentAt - DueAt of sent reminders (seed SLO: <= 120 s)",
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        self.skip_locked = Counter(
            "calendar_reminder_dispatch_skip_locked_total",
            "Due rows passed over because another instance or an event change held their lock",
            registry=registry,
        )
        self.errors = Counter(
            "calendar_reminder_dispatch_errors_total",
            "Poison rows excluded from a batch and failed runs",
            registry=registry,
        )
