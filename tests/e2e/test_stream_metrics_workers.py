"""A real worker's /metrics as a stream operator reads it: consumer lag per partition that
drops to 0 once the records from a plain aiokafka producer are consumed, the assigned
partitions, a rebalance counted when a second worker joins, and build_info."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devkit.kafka import produce
from devkit.messages.factories import calendar_event, encode
from devkit.observe.metrics import sample
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

EVENTS = "pin.calendar.events.v1"
N = 40


def series(text: str, name: str, **labels: str) -> dict[str, float]:
    """Every sample ``name`` whose labels include ``labels``, by its partition label."""
    return {
        s.labels.get("partition", ""): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    }


def metrics(worker: WorkerProcess) -> str:
    status, text = worker.get("/metrics")
    assert status == 200
    return str(text)


@pytest.mark.timeout(420)
async def test_lag_per_partition_assignment_rebalances_and_build_info(
    module_database_url: str, kafka_bootstrap: str, module_topic_prefix: str, module_tmp: Path
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=module_topic_prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    topic = module_topic_prefix + EVENTS
    env = worker_env(module_database_url, kafka_bootstrap, module_topic_prefix)
    first = WorkerProcess(env, module_tmp, "first").start()
    second: WorkerProcess | None = None
    try:
        await first.wait_ready()
        text = await asyncio.to_thread(metrics, first)
        assert sample(text, "reminders_stream_assigned_partitions", topic=topic) == 4
        assert (sample(text, "reminders_stream_rebalances_total") or 0) >= 1
        assert sample(text, "reminders_stream_changelog_recovered") == 1
        assert (
            sample(
                text,
                "reminders_build_info",
                version=version("reminders-stream"),
                faust_version=version("faust-streaming"),
                aiokafka_version=version("aiokafka"),
            )
            == 1
        )

        later = datetime.now(UTC) + timedelta(days=1)
        records: list[tuple[str | None, bytes | None]] = []
        for _ in range(N):
            msg = calendar_event(StartAt=later, OccurredAt=datetime.now(UTC))
            records.append((msg["EventId"], encode(msg)))
        await produce(kafka_bootstrap, topic, records)

        def consumed() -> tuple[float, dict[str, float]]:
            text = metrics(first)
            handled = sum(
                sample(text, "reminders_stream_messages_total", topic=EVENTS, result=r) or 0
                for r in ("applied", "noop", "dlq")
            )
            return handled, series(text, "reminders_stream_consumer_lag", topic=topic)

        _, lag = await eventually(
            lambda: asyncio.to_thread(consumed),
            until=lambda v: v[0] == N and len(v[1]) == 4 and not any(v[1].values()),
            timeout=120,
            what="every record consumed and committed: lag 0 on each partition",
        )
        assert lag == {"0": 0, "1": 0, "2": 0, "3": 0}
        text = await asyncio.to_thread(metrics, first)
        assert series(text, "reminders_stream_consumer_lag_seconds", topic=topic) == lag
        agent = sample(
            text, "reminders_stream_processing_latency_seconds_count", agent="calendar-events"
        )
        assert agent is not None and agent >= 1
        rebalances = sample(text, "reminders_stream_rebalances_total") or 0
        timed = sample(text, "reminders_stream_rebalance_duration_seconds_count") or 0

        second = WorkerProcess(env, module_tmp, "second").start()
        await second.wait_ready()

        def shared() -> tuple[float, float, float, float]:
            a, b = metrics(first), metrics(second)
            return (
                sample(a, "reminders_stream_rebalances_total") or 0,
                sample(a, "reminders_stream_rebalance_duration_seconds_count") or 0,
                sample(a, "reminders_stream_assigned_partitions", topic=topic) or 0,
                sample(b, "reminders_stream_assigned_partitions", topic=topic) or 0,
            )

        # Counted when it starts, timed when it ends (partitions assigned, tables recovered).
        await eventually(
            lambda: asyncio.to_thread(shared),
            until=lambda v: (
                v[0] > rebalances and v[1] > timed and v[2] + v[3] == 4 and v[2] > 0 and v[3] > 0
            ),
            timeout=120,
            what="a rebalance counted, timed, and the partitions shared",
        )
        text = await asyncio.to_thread(metrics, first)
        assert (sample(text, "reminders_stream_last_rebalance_timestamp_seconds") or 0) > 0
        assert set(series(text, "reminders_stream_consumer_lag", topic=topic)) == {
            str(p) for p in range(4)
        } - set(series(metrics(second), "reminders_stream_consumer_lag", topic=topic))
    finally:
        if second is not None:
            second.stop()
        first.stop()
