"""Consumer lag per assigned partition (end offset - committed offset), read once for /status
and /metrics, and the stream series a scrape refreshes from it (StreamMetrics)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from streams.faust_compat import committed_offsets
from streams.input.progress import PartitionProgress
from streams.metrics import StreamMetrics


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    highwater: int | None
    committed: int | None
    # The timestamp (Unix seconds) of the last record this worker committed on it, if any.
    last_timestamp: float | None = None

    @property
    def lag(self) -> int | None:
        """Records past the committed offset; None until both offsets are known."""
        if self.highwater is None or self.committed is None:
            return None
        return max(0, self.highwater - self.committed)

    def age(self, now: float) -> float | None:
        """How far behind in time: 0 when caught up, else the age of the last record
        committed (None when it has lag and nothing was committed here yet)."""
        lag = self.lag
        if lag is None:
            return None
        if lag == 0:
            return 0.0
        if self.last_timestamp is None:
            return None
        return max(0.0, now - self.last_timestamp)


class StreamSource(Protocol):
    """What the stream series are read from (the Faust app, or a fake in tests)."""

    def partitions(self) -> Sequence[PartitionLag]:
        """Every partition assigned to the consumer, with its offsets."""
        ...

    def recovery_remaining(self) -> int:
        """Changelog records still to read before the tables are recovered."""
        ...

    def recovered(self) -> bool: ...


def partition_lags(app: Any, progress: Iterable[PartitionProgress] = ()) -> list[PartitionLag]:
    """Every assigned partition of ``app``'s consumer (sorted), with its end and committed
    offsets and the last committed record's timestamp the agents' ``progress`` holds."""
    consumer = app.consumer
    if not consumer.started:
        return []
    committed = committed_offsets(consumer)
    trackers = list(progress)
    out = []
    for tp in sorted(consumer.assignment()):
        stamps = [s for p in trackers if (s := p.last_timestamp(tp)) is not None]
        out.append(
            PartitionLag(
                tp.topic,
                tp.partition,
                consumer.highwater(tp),
                committed.get(tp),
                max(stamps) if stamps else None,
            )
        )
    return out


class FaustStreamSource:
    def __init__(self, app: Any, consumers: Mapping[str, Any]) -> None:
        self.app = app
        self.consumers = consumers

    def partitions(self) -> Sequence[PartitionLag]:
        return partition_lags(self.app, (c.progress for c in self.consumers.values()))

    def recovery_remaining(self) -> int:
        recovery = getattr(self.app.tables, "recovery")  # noqa: B009 (not on TableManagerT)
        return int(recovery.active_remaining_total())

    def recovered(self) -> bool:
        recovery = getattr(self.app.tables, "recovery")  # noqa: B009
        return bool(recovery.completed.is_set())


def refresh(metrics: StreamMetrics, source: StreamSource, now: float) -> None:
    """Set the scrape-time stream series from ``source``; partitions no longer assigned
    drop out of the lag series."""
    parts = source.partitions()
    metrics.lag.clear()
    metrics.lag_seconds.clear()
    metrics.assigned.clear()
    per_topic: dict[str, int] = {}
    for p in parts:
        per_topic[p.topic] = per_topic.get(p.topic, 0) + 1
        labels = (p.topic, str(p.partition))
        lag = p.lag
        if lag is None:
            continue  # a changelog partition, or nothing committed yet
        metrics.lag.labels(*labels).set(lag)
        age = p.age(now)
        if age is not None:
            metrics.lag_seconds.labels(*labels).set(age)
    for topic, count in per_topic.items():
        metrics.assigned.labels(topic).set(count)
    recovered = source.recovered()
    metrics.recovered.set(1 if recovered else 0)
    metrics.recovery_remaining.set(0 if recovered else source.recovery_remaining())
