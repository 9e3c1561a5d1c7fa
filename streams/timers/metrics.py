"""Prometheus metrics of the timer registry, created once on an injectable registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# One set of lateness buckets for the whole service (fine at the low end, the seed's 120 s).
from streams.metrics import LATENESS_BUCKETS

RESULTS = ("ok", "failed", "timeout", "cancelled")
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class TimerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.runs = Counter(
            "reminders_timer_runs_total",
            "Handler runs by schedule and result (ok, failed, timeout, cancelled)",
            ["schedule", "result"],
            registry=registry,
        )
        self.duration = Histogram(
            "reminders_timer_run_duration_seconds",
            "Wall time of one handler run",
            ["schedule"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.lateness = Histogram(
            "reminders_timer_start_lateness_seconds",
            "Actual start of a slot's run minus the slot's scheduled time",
            ["schedule"],
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        self.missed = Counter(
            "reminders_timer_missed_slots_total",
            "Slots whose time passed without an on-time run (downtime or an overrun)",
            ["schedule"],
            registry=registry,
        )
        self.dedupes = Counter(
            "reminders_timer_slot_dedupes_total",
            "Cluster-once slots this worker did not run because another worker claimed them",
            ["schedule"],
            registry=registry,
        )
        self.overlap_skips = Counter(
            "reminders_timer_overlap_skips_total",
            "Ticks that fired while the previous run of the same schedule was still going",
            ["schedule"],
            registry=registry,
        )
        self.takeovers = Counter(
            "reminders_timer_slot_takeovers_total",
            "Cluster-once slots this worker took over after their claimant's lease ran out",
            ["schedule"],
            registry=registry,
        )
        self.lease_lost = Counter(
            "reminders_timer_lease_lost_total",
            "Runs of this worker whose slot another worker took over before they finished",
            ["schedule"],
            registry=registry,
        )
        self.last_success = Gauge(
            "reminders_timer_last_success_timestamp_seconds",
            "Unix time at which this worker's last run of the schedule ended ok (liveness alerts)",
            ["schedule"],
            registry=registry,
        )
        self.claim_retries = Counter(
            "reminders_timer_claim_retries_total",
            "Slot claims that failed (store unavailable) and are retried after a backoff",
            ["schedule"],
            registry=registry,
        )

        self.retries = Counter(
            "reminders_timer_slot_retries_total",
            "Cluster-once slots released after a failed, timed-out or cancelled run, for "
            "another attempt after a backoff",
            ["schedule"],
            registry=registry,
        )
        self.handbacks = Counter(
            "reminders_timer_slot_handbacks_total",
            "Cluster-once slots handed back unfinished on a graceful stop (no attempt counted)",
            ["schedule"],
            registry=registry,
        )
        self.given_up = Counter(
            "reminders_timer_slots_given_up_total",
            "Cluster-once slots finished failed after their last attempt (the day is lost)",
            ["schedule"],
            registry=registry,
        )

        # Set only by the process that runs the schedule (a worker's timer process runs
        # some): the merged /metrics then has one series per schedule.
        self.paused = Gauge(
            "reminders_timer_paused",
            "1 while the schedule is paused cluster-wide (ops.timer_pauses, as last read)",
            ["schedule"],
            registry=registry,
        )
        self.paused_runs = Counter(
            "reminders_timer_paused_runs_total",
            "Runs not started because the schedule was paused cluster-wide",
            ["schedule"],
            registry=registry,
        )
        self.pause_read_failures = Counter(
            "reminders_timer_pause_read_failures_total",
            "Reads of the pause flag that failed (the state last read is kept; paused before any)",
            ["schedule"],
            registry=registry,
        )

    def prime(self, schedule: str) -> None:
        """Create every series of a schedule at zero so dashboards and rate() see it at once."""
        for result in RESULTS:
            self.runs.labels(schedule=schedule, result=result)
        self.duration.labels(schedule=schedule)
        self.lateness.labels(schedule=schedule)
        self.missed.labels(schedule=schedule)
        self.dedupes.labels(schedule=schedule)
        self.overlap_skips.labels(schedule=schedule)
        self.takeovers.labels(schedule=schedule)
        self.lease_lost.labels(schedule=schedule)
        self.claim_retries.labels(schedule=schedule)
        self.retries.labels(schedule=schedule)
        self.handbacks.labels(schedule=schedule)
        self.given_up.labels(schedule=schedule)
        self.paused_runs.labels(schedule=schedule)
