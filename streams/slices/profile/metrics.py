"""Metrics of the profile slice; the first four names are fixed by seed 001
(DocumentExpiryReminderJob)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from streams.metrics import LATENCY_BUCKETS

CYCLE_BUCKETS = (*LATENCY_BUCKETS, 120.0, 300.0, 600.0, 900.0)
OWNER_RESULTS = ("cache", "ledger", "failed")


class DocumentExpiryMetrics:
    """Run and per-owner metrics, created once per worker (``runtime.metrics.family``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.reminders = Counter(
            "profile_document_expiry_reminders_total",
            "Expiry reminders sent (documents in a DocumentExpiryReminderEvent), by t*",
            ["threshold_days"],
            registry=registry,
        )
        self.cycle_duration = Histogram(
            "profile_document_expiry_reminder_cycle_duration_seconds",
            "Duration of one document expiry run (scan, every owner, prune)",
            buckets=CYCLE_BUCKETS,
            registry=registry,
        )
        self.backlog = Gauge(
            "profile_document_expiry_reminder_backlog",
            "Active documents in the window with a crossed threshold still unmarked, after the last run",
            registry=registry,
        )
        self.errors = Counter(
            "profile_document_expiry_reminder_errors_total",
            "Owners whose transaction failed, and failed runs",
            registry=registry,
        )
        self.owners = Counter(
            "profile_document_expiry_owners_total",
            "Owners handled by result: cache (settled by the verified per-owner cache), "
            "ledger (marks read and inserted in PostgreSQL), failed",
            ["result"],
            registry=registry,
        )
        self.cache_disagreements = Counter(
            "profile_document_expiry_cache_disagreements_total",
            "Batches whose per-owner cache claimed marks the ledger does not have (those owners "
            "went to the ledger instead)",
            registry=registry,
        )
        for result in OWNER_RESULTS:
            self.owners.labels(result)
