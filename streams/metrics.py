"""Prometheus metrics, created once on an injectable registry and handed to whoever records them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
# One set of lateness buckets for every "how late did it start / go out" histogram: fine at
# the low end (sub-second targets), and 120 s for the seed's SLO.
LATENESS_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    900.0,
    3600.0,
)


class AgentMetrics:
    """Input side: messages consumed, rejected to the DLQ, processing time."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.messages = Counter(
            "stream_messages_total",
            "Input messages handled, by topic and result: applied (changed state), noop (stale, replayed or unchanged), dlq",
            ["topic", "result"],
            registry=registry,
        )
        self.dlq = Counter(
            "stream_dlq_messages_total",
            "Input messages sent to the dead-letter topic, by topic and error kind",
            ["topic", "kind"],
            registry=registry,
        )
        self.dlq_failures = Counter(
            "stream_dlq_failures_total",
            "Messages Kafka refused to take on the DLQ in any form (logged with their input coordinates)",
            ["topic"],
            registry=registry,
        )
        self.stalled = Gauge(
            "stream_partitions_stalled",
            "Assigned input partitions with lag that made no progress for STREAM_STALL_SECONDS",
            ["agent"],
            registry=registry,
        )
        self.batch_seconds = Histogram(
            "stream_batch_duration_seconds",
            "Time to apply one batch of input messages to PostgreSQL",
            ["topic"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.retries = Counter(
            "stream_infrastructure_retries_total",
            "Batches retried because PostgreSQL was unavailable or unwell (the input was fine)",
            ["topic"],
            registry=registry,
        )
        self.gaps = Counter(
            "stream_input_gaps_total",
            "Offsets that never reached the stream; the partition was re-read from the gap",
            ["topic"],
            registry=registry,
        )
        self.offset_holes = Counter(
            "stream_input_offset_holes_total",
            "Offset jumps with no record on the broker (transaction markers, compaction)",
            ["topic"],
            registry=registry,
        )
        self.gap_reads = Counter(
            "stream_input_gap_reads_total",
            "Broker reads made to fill or verify offsets the stream skipped",
            ["topic"],
            registry=registry,
        )
        self.cache = Counter(
            "stream_table_cache_total",
            "Changelog-table cache lookups in front of PostgreSQL, by table and result (hit, miss)",
            ["table", "result"],
            registry=registry,
        )


class OutboxMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.published = Counter(
            "outbox_published_total", "Outbox rows published", ["topic"], registry=registry
        )
        self.errors = Counter(
            "outbox_publish_errors_total", "Relay batches that failed", registry=registry
        )
        self.backlog = Gauge("outbox_backlog", "Outbox rows not yet published", registry=registry)
        self.oldest_age = Gauge(
            "outbox_oldest_unpublished_age_seconds",
            "Age of the oldest unpublished outbox row (0 when none)",
            registry=registry,
        )
        self.lag = Histogram(
            "outbox_publish_lag_seconds",
            "Outbox row created_at -> acknowledged by Kafka",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.deleted = Counter(
            "outbox_deleted_total", "Published rows deleted after retention", registry=registry
        )
        self.producer_restarts = Counter(
            "outbox_producer_restarts_total",
            "Relay Kafka producers replaced because they became unusable, by reason "
            "(publish_timeout, fatal_error, closed, sender_stopped)",
            ["reason"],
            registry=registry,
        )


class DbMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.statements = Counter(
            "db_statements",
            "Statements this process sent to PostgreSQL through its pool (BEGIN/COMMIT included)",
            registry=registry,
        )


F = TypeVar("F")


class Metrics:
    """All metric families of one worker, on one registry: the shared ones as attributes, a
    slice's own through ``family`` (created on first use, once per registry)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.agents = AgentMetrics(self.registry)
        self.outbox = OutboxMetrics(self.registry)
        self.db = DbMetrics(self.registry)
        self._families: dict[type[Any], Any] = {}

    def family(self, kind: Callable[[CollectorRegistry], F]) -> F:
        """The instance of metric family ``kind`` (a class taking the registry) for this worker."""
        key = cast(type[Any], kind)
        found = self._families.get(key)
        if found is None:
            found = self._families[key] = kind(self.registry)
        return cast(F, found)
