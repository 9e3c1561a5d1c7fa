"""Prometheus metrics, created once on an injectable registry and handed to whoever records them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any, TypeVar, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

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
# Rebalances (revoke, assign, table recovery) take seconds to minutes.
REBALANCE_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class AgentMetrics:
    """Input side: messages consumed, rejected to the DLQ, processing time."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.messages = Counter(
            "reminders_stream_messages_total",
            "Input messages handled, by topic and result: applied (changed state), noop (stale, replayed or unchanged), dlq",
            ["topic", "result"],
            registry=registry,
        )
        self.dlq = Counter(
            "reminders_stream_dlq_messages_total",
            "Input messages sent to the dead-letter topic, by topic and error kind",
            ["topic", "kind"],
            registry=registry,
        )
        self.dlq_failures = Counter(
            "reminders_stream_dlq_failures_total",
            "Messages Kafka refused to take on the DLQ in any form (logged with their input coordinates)",
            ["topic"],
            registry=registry,
        )
        self.stalled = Gauge(
            "reminders_stream_partitions_stalled",
            "Assigned input partitions with lag that made no progress for STREAM_STALL_SECONDS",
            ["agent"],
            registry=registry,
        )
        self.batch_seconds = Histogram(
            "reminders_stream_batch_duration_seconds",
            "Time to apply one batch of input messages to PostgreSQL",
            ["topic"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.retries = Counter(
            "reminders_stream_infrastructure_retries_total",
            "Batches retried because PostgreSQL or the worker's local store was unwell (the input was fine)",
            ["topic"],
            registry=registry,
        )
        self.gaps = Counter(
            "reminders_stream_input_gaps_total",
            "Offsets that never reached the stream; the partition was re-read from the gap",
            ["topic"],
            registry=registry,
        )
        self.offset_holes = Counter(
            "reminders_stream_input_offset_holes_total",
            "Offset jumps with no record on the broker (transaction markers, compaction)",
            ["topic"],
            registry=registry,
        )
        self.gap_reads = Counter(
            "reminders_stream_input_gap_reads_total",
            "Broker reads made to fill or verify offsets the stream skipped",
            ["topic"],
            registry=registry,
        )
        self.cache = Counter(
            "reminders_stream_table_cache_total",
            "Changelog-table cache lookups in front of PostgreSQL, by table and result (hit, miss)",
            ["table", "result"],
            registry=registry,
        )
        self.local_storage_errors = Counter(
            "reminders_stream_local_storage_errors_total",
            "Reads and writes of a cache table that the worker's local store (RocksDB) failed, "
            "by table and op (a read falls back to PostgreSQL; a write is retried, holding its batch)",
            ["table", "op"],
            registry=registry,
        )
        self.processing_latency = Histogram(
            "reminders_stream_processing_latency_seconds",
            "A batch's oldest message timestamp -> its batch committed to PostgreSQL, by agent",
            ["agent"],
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        self.local_storage_failing = Gauge(
            "reminders_stream_local_storage_failing",
            "1 while a cache table's local store fails (its last read or write failed)",
            ["table"],
            registry=registry,
        )


def _version(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "0+unknown"


class StreamMetrics:
    """The consumer as Kafka sees it: lag per partition, assignment, rebalances, changelog
    recovery, and what this build is. Lag and recovery are read at each scrape
    (streams/input/lag.py); rebalances are counted by the sensor (streams/input/monitor.py)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.lag = Gauge(
            "reminders_stream_consumer_lag",
            "Records of an assigned input partition past its committed offset "
            "(end offset - committed offset)",
            ["topic", "partition"],
            registry=registry,
        )
        self.lag_seconds = Gauge(
            "reminders_stream_consumer_lag_seconds",
            "Age of the last record committed on a partition that has lag (0 when caught up): "
            "how far behind in time the consumer is",
            ["topic", "partition"],
            registry=registry,
        )
        self.assigned = Gauge(
            "reminders_stream_assigned_partitions",
            "Partitions assigned to this worker's consumer, by topic",
            ["topic"],
            registry=registry,
        )
        self.rebalances = Counter(
            "reminders_stream_rebalances_total",
            "Consumer group rebalances this worker took part in (its first assignment included)",
            registry=registry,
        )
        self.rebalance_seconds = Histogram(
            "reminders_stream_rebalance_duration_seconds",
            "Rebalance start -> done (partitions assigned and the tables recovered)",
            buckets=REBALANCE_BUCKETS,
            registry=registry,
        )
        self.last_rebalance = Gauge(
            "reminders_stream_last_rebalance_timestamp_seconds",
            "When the last rebalance of this worker completed (Unix time)",
            registry=registry,
        )
        self.rebalancing = Gauge(
            "reminders_stream_rebalancing", "1 while a rebalance is in progress", registry=registry
        )
        self.recovery_remaining = Gauge(
            "reminders_stream_changelog_recovery_remaining",
            "Changelog records still to read before the worker's tables are recovered",
            registry=registry,
        )
        self.recovered = Gauge(
            "reminders_stream_changelog_recovered",
            "1 once the tables are recovered from their changelogs, 0 while recovering",
            registry=registry,
        )
        self.build_info = Gauge(
            "reminders_build_info",
            "Always 1; the labels say which build runs (service, Faust and aiokafka versions)",
            ["version", "faust_version", "aiokafka_version"],
            registry=registry,
        )
        self.build_info.labels(
            _version("reminders-stream"), _version("faust-streaming"), _version("aiokafka")
        ).set(1)


class OutboxMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.published = Counter(
            "reminders_outbox_published_total",
            "Outbox rows published",
            ["topic"],
            registry=registry,
        )
        self.errors = Counter(
            "reminders_outbox_publish_errors_total", "Relay batches that failed", registry=registry
        )
        self.backlog = Gauge(
            "reminders_outbox_backlog", "Outbox rows not yet published", registry=registry
        )
        self.oldest_age = Gauge(
            "reminders_outbox_oldest_unpublished_age_seconds",
            "Age of the oldest unpublished outbox row (0 when none)",
            registry=registry,
        )
        self.lag = Histogram(
            "reminders_outbox_publish_lag_seconds",
            "Outbox row created_at -> acknowledged by Kafka",
            # Past OutboxPublishLagging's 300 s, so a quantile near that threshold is a number.
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        self.deleted = Counter(
            "reminders_outbox_deleted_total",
            "Published rows deleted after retention",
            registry=registry,
        )
        self.producer_restarts = Counter(
            "reminders_outbox_producer_restarts_total",
            "Relay Kafka producers replaced because they became unusable, by reason "
            "(publish_timeout, pass_failed, fatal_error, closed, sender_stopped)",
            ["reason"],
            registry=registry,
        )
        self.parked_total = Counter(
            "reminders_outbox_parked_total",
            "Outbox rows the relay parked (moved out of their lane) because Kafka refused them "
            "for a reason that will not change by itself, by topic and reason",
            ["topic", "reason"],
            registry=registry,
        )
        self.parked = Gauge(
            "reminders_outbox_parked_rows",
            "Outbox rows parked now (ops.outbox_parked), waiting for retry or drop",
            registry=registry,
        )
        self.in_doubt = Counter(
            "reminders_outbox_publish_in_doubt_total",
            "Relay passes that waited past the publish timeout for Kafka's acknowledgements "
            "(holding their lanes) instead of sending their rows again",
            registry=registry,
        )


class DbMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.statements = Counter(
            "reminders_db_statements_total",
            "Statements this process sent to PostgreSQL through its pool (BEGIN/COMMIT included)",
            registry=registry,
        )
        self.clock_skew = Gauge(
            "reminders_worker_clock_skew_seconds",
            "This worker's own clock minus PostgreSQL's at the last reading (the worker runs on "
            "the database's time; past CLOCK_SKEW_MAX_SECONDS either way it is not ready)",
            registry=registry,
        )


F = TypeVar("F")


class MergingRegistry(CollectorRegistry):
    """A registry whose families of the same name, from several collectors, come out as one.

    A worker has two processes (streams/timer_process): the child's families arrive as a
    collector of the parent's registry, and both processes create the same families. Merged
    per sample (same name and labels): counters and histograms add up, a gauge takes the
    larger value (each gauge is set by one of the two processes; the other holds 0), and a
    ``_created`` timestamp the earlier one. ``generate_latest`` and ``get_sample_value``
    see the merged families.
    """

    def collect(self) -> Iterator[Metric]:
        return iter(merge_families(super().collect()))


def merge_families(families: Iterable[Metric]) -> list[Metric]:
    merged: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], Sample]] = {}
    for family in families:
        into = merged.get(family.name)
        if into is None:
            into = merged[family.name] = Metric(
                family.name, family.documentation, family.type, family.unit
            )
            values[family.name] = {}
        samples = values[family.name]
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            seen = samples.get(key)
            if seen is None:
                samples[key] = sample
            elif sample.name.endswith("_created"):
                samples[key] = seen._replace(value=min(seen.value, sample.value))
            elif family.type == "gauge":
                samples[key] = seen._replace(value=max(seen.value, sample.value))
            else:
                samples[key] = seen._replace(value=seen.value + sample.value)
    for name, family in merged.items():
        family.samples = list(values[name].values())
    return list(merged.values())


def families_to_json(registry: CollectorRegistry) -> list[dict[str, Any]]:
    """A registry's families as plain data (what a worker's timer process sends its parent)."""
    return [
        {
            "name": m.name,
            "documentation": m.documentation,
            "type": m.type,
            "unit": m.unit,
            "samples": [[s.name, s.labels, s.value] for s in m.samples],
        }
        for m in registry.collect()
    ]


def families_from_json(data: Iterable[dict[str, Any]]) -> list[Metric]:
    out = []
    for item in data:
        family = Metric(item["name"], item["documentation"], item["type"], item["unit"])
        for name, labels, value in item["samples"]:
            family.add_sample(str(name), {str(k): str(v) for k, v in labels.items()}, float(value))
        out.append(family)
    return out


class StaticCollector:
    """Families handed in from elsewhere (the timer process's latest), collected as they are."""

    def __init__(self) -> None:
        self.families: list[Metric] = []

    def collect(self) -> list[Metric]:
        return self.families


class Metrics:
    """All metric families of one worker, on one registry: the shared ones as attributes, a
    slice's own through ``family`` (created on first use, once per registry)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else MergingRegistry()
        self.agents = AgentMetrics(self.registry)
        self.outbox = OutboxMetrics(self.registry)
        self.db = DbMetrics(self.registry)
        self.stream = StreamMetrics(self.registry)
        self._families: dict[type[Any], Any] = {}

    def family(self, kind: Callable[[CollectorRegistry], F]) -> F:
        """The instance of metric family ``kind`` (a class taking the registry) for this worker."""
        key = cast(type[Any], kind)
        found = self._families.get(key)
        if found is None:
            found = self._families[key] = kind(self.registry)
        return cast(F, found)
