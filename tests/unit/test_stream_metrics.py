"""The stream series (streams/metrics.py StreamMetrics, streams/input/lag.py): consumer lag per
partition and its age, assigned partitions, changelog recovery, rebalances counted by the
sensor, processing latency per agent and build_info, each on its own registry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry

from streams.contracts import TopicContract
from streams.contracts.base import Contract
from streams.input.consumer import ContractConsumer
from streams.input.lag import PartitionLag, refresh
from streams.input.monitor import LeanMonitor
from streams.metrics import Metrics


@dataclass
class FakeSource:
    parts: list[PartitionLag]
    remaining: int = 0
    done: bool = True

    def partitions(self) -> Sequence[PartitionLag]:
        return self.parts

    def recovery_remaining(self) -> int:
        return self.remaining

    def recovered(self) -> bool:
        return self.done


def value(m: Metrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_lag_is_end_offset_minus_committed_and_its_age_that_of_the_last_commit() -> None:
    m = Metrics(CollectorRegistry())
    source = FakeSource(
        [
            PartitionLag("in", 0, highwater=10, committed=4, last_timestamp=1000.0),
            PartitionLag("in", 1, highwater=7, committed=7, last_timestamp=990.0),
            PartitionLag("in", 2, highwater=3, committed=None),  # nothing committed yet
            PartitionLag("other", 0, highwater=5, committed=2),  # behind, nothing read here
        ]
    )
    refresh(m.stream, source, now=1030.0)
    assert value(m, "reminders_stream_consumer_lag", topic="in", partition="0") == 6
    assert value(m, "reminders_stream_consumer_lag", topic="in", partition="1") == 0
    assert value(m, "reminders_stream_consumer_lag", topic="in", partition="2") is None
    assert value(m, "reminders_stream_consumer_lag", topic="other", partition="0") == 3
    assert value(m, "reminders_stream_consumer_lag_seconds", topic="in", partition="0") == 30
    assert value(m, "reminders_stream_consumer_lag_seconds", topic="in", partition="1") == 0
    assert value(m, "reminders_stream_consumer_lag_seconds", topic="other", partition="0") is None
    assert value(m, "reminders_stream_assigned_partitions", topic="in") == 3
    assert value(m, "reminders_stream_assigned_partitions", topic="other") == 1


def test_a_partition_no_longer_assigned_leaves_the_lag_series() -> None:
    m = Metrics(CollectorRegistry())
    source = FakeSource([PartitionLag("in", 0, 10, 4), PartitionLag("in", 1, 10, 9)])
    refresh(m.stream, source, now=0.0)
    source.parts = [PartitionLag("in", 1, 10, 10)]
    refresh(m.stream, source, now=0.0)
    assert value(m, "reminders_stream_consumer_lag", topic="in", partition="0") is None
    assert value(m, "reminders_stream_consumer_lag", topic="in", partition="1") == 0
    assert value(m, "reminders_stream_assigned_partitions", topic="in") == 1
    source.parts = []
    refresh(m.stream, source, now=0.0)
    assert value(m, "reminders_stream_assigned_partitions", topic="in") is None


def test_changelog_recovery_progress() -> None:
    m = Metrics(CollectorRegistry())
    source = FakeSource([], remaining=120, done=False)
    refresh(m.stream, source, now=0.0)
    assert value(m, "reminders_stream_changelog_recovery_remaining") == 120
    assert value(m, "reminders_stream_changelog_recovered") == 0
    source.remaining, source.done = 0, True
    refresh(m.stream, source, now=0.0)
    assert value(m, "reminders_stream_changelog_recovery_remaining") == 0
    assert value(m, "reminders_stream_changelog_recovered") == 1


def test_the_sensor_counts_rebalances_their_duration_and_the_last_one() -> None:
    m = Metrics(CollectorRegistry())
    monitor = LeanMonitor(m.stream)
    monitor.wall_clock = lambda: 1234.0
    app: Any = SimpleNamespace(rebalancing_count=1)
    for _ in range(2):
        state = monitor.on_rebalance_start(app)
        assert value(m, "reminders_stream_rebalancing") == 1
        monitor.on_rebalance_end(app, state)
    assert value(m, "reminders_stream_rebalances_total") == 2
    assert value(m, "reminders_stream_rebalance_duration_seconds_count") == 2
    assert value(m, "reminders_stream_last_rebalance_timestamp_seconds") == 1234.0
    assert value(m, "reminders_stream_rebalancing") == 0
    assert monitor.rebalance_end_latency  # Faust's own bookkeeping still runs


class Item(Contract):
    n: int


@dataclass
class Msg:
    offset: int
    timestamp: float
    tp: str = "in-0"


@dataclass
class Event:
    message: Msg
    acked: list[int] = field(default_factory=list)

    def ack(self) -> bool:
        self.acked.append(self.message.offset)
        return True


def test_processing_latency_is_the_oldest_message_timestamp_to_the_ack_per_agent() -> None:
    m = Metrics(CollectorRegistry())

    async def apply(batch: object) -> None:
        return None

    consumer = ContractConsumer(
        TopicContract("in", Item, lambda i: str(i.n), "in"),
        apply,
        dlq=None,  # type: ignore[arg-type]
        metrics=m.agents,
        agent="in-agent",
        now=lambda: 100.0,
    )
    consumer._acked([Event(Msg(0, 40.0)), Event(Msg(1, 90.0))])
    assert value(m, "reminders_stream_processing_latency_seconds_count", agent="in-agent") == 1
    assert value(m, "reminders_stream_processing_latency_seconds_sum", agent="in-agent") == 60
    assert consumer.progress.last_timestamp("in-0") == 90.0


async def test_a_batch_counts_applied_and_noop_messages_by_the_positions_it_changed() -> None:
    m = Metrics(CollectorRegistry())
    seen: list[tuple[int, str]] = []

    async def apply(batch: Sequence[Any]) -> object:
        return SimpleNamespace(applied_positions={0, 2})

    consumer = ContractConsumer(
        TopicContract("in", Item, lambda i: str(i.n), "in"),
        apply,
        dlq=None,  # type: ignore[arg-type]
        metrics=m.agents,
        on_outcome=lambda event, outcome, reason: seen.append((event.message.offset, outcome)),
    )
    events = [
        SimpleNamespace(message=SimpleNamespace(offset=i, value=f'{{"N": {i}}}'.encode()))
        for i in range(4)
    ]
    await consumer.handle_events(events)  # type: ignore[arg-type]
    assert value(m, "reminders_stream_messages_total", topic="in", result="applied") == 2
    assert value(m, "reminders_stream_messages_total", topic="in", result="noop") == 2
    assert seen == [(0, "applied"), (1, "noop"), (2, "applied"), (3, "noop")]


def test_build_info_names_the_service_faust_and_aiokafka_versions() -> None:
    m = Metrics(CollectorRegistry())
    labels = {
        "version": version("reminders-stream"),
        "faust_version": version("faust-streaming"),
        "aiokafka_version": version("aiokafka"),
    }
    assert value(m, "reminders_build_info", **labels) == 1


def test_the_outbox_lag_buckets_reach_past_its_alert_threshold() -> None:
    m = Metrics(CollectorRegistry())
    assert value(m, "reminders_outbox_publish_lag_seconds_bucket", le="300.0") == 0
