"""Metrics of the automation scheduler (seed 003): its claims, outcomes, backlog, hand-backs,
fenced writes, Ensure/Deactivate counts and durations, created once per worker."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from streams.metrics import LATENCY_BUCKETS, LATENESS_BUCKETS


class AutomationMetrics:
    """Claims, outcomes, backlog, rescues, interruptions, holds, fenced writes and durations."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.claimed = Counter(
            "automation_scheduler_claimed_total",
            "Due rows claimed (Pending -> Processing with a lease and a new Version)",
            registry=registry,
        )
        self.outcomes = Counter(
            "automation_scheduler_outcomes_total",
            "Claimed rows finished, by outcome (completed, deactivated, failed, held) and "
            "reason (ReasonCode or FailureReasonCode; empty for completed)",
            ["outcome", "reason"],
            registry=registry,
        )
        self.due_backlog = Gauge(
            "automation_scheduler_due_backlog",
            "Claimable rows already due after the last run",
            registry=registry,
        )
        self.oldest_due_age = Gauge(
            "automation_scheduler_oldest_due_age_seconds",
            "How long the oldest claimable due row has been due (0 when none)",
            registry=registry,
        )
        self.stale_rescued = Counter(
            "automation_scheduler_stale_rescued_total",
            "Processing rows whose lease expired, put back by stale cleanup (or held)",
            registry=registry,
        )
        self.interrupted = Counter(
            "automation_scheduler_interrupted_total",
            "Claims that ended without a verdict, by path (hand_back: the runner gave its rows "
            "back after a transient database error or a cancelled run; lease_expired: stale "
            "cleanup) and charged (true once the row's interruption allowance is spent and the "
            "interruption counted as an attempt)",
            ["path", "charged"],
            registry=registry,
        )
        self.hand_back_failed = Counter(
            "automation_scheduler_hand_back_failed_total",
            "Claimed rows the runner could not hand back (the database was still away): left "
            "to stale cleanup, which counts them as interrupted when their lease expires",
            registry=registry,
        )
        self.on_hold = Gauge(
            "automation_scheduler_on_hold",
            "Rows on support hold after the last run",
            registry=registry,
        )
        self.fenced = Counter(
            "automation_scheduler_fenced_total",
            "Writes rejected because the row's Version no longer matched the writer's token "
            "(a claim whose lease expired and whose row moved on), by intended transition",
            ["transition"],
            registry=registry,
        )
        self.ensured = Counter(
            "automation_scheduler_ensure_total",
            "Ensure results per key, by outcome (Inserted, Reactivated, Updated, Unchanged, "
            "InFlight, AlreadyCompleted, OperatorCancelled, Conflict)",
            ["outcome"],
            registry=registry,
        )
        self.deactivated_by_source = Counter(
            "automation_scheduler_deactivate_total",
            "Deactivate/cancel requests per key, by result (changed, unchanged, missing)",
            ["result"],
            registry=registry,
        )
        self.claim_duration = Histogram(
            "automation_scheduler_claim_duration_seconds",
            "Time of one claim transaction",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.execution_duration = Histogram(
            "automation_scheduler_execution_duration_seconds",
            "Time to execute one claimed batch (revalidate, transitions, outbox) in one transaction",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.lateness = Histogram(
            "automation_scheduler_lateness_seconds",
            "Completion time minus due time of completed rows",
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
