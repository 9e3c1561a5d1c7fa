"""What /status reports, as data: agents, tables, timers, outbox, and each slice's sections."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any

import faust

from db.connector import DatabaseUnavailable, InputRejected
from streams.input.consumer import ContractConsumer
from streams.input.lag import partition_lags
from streams.maintenance.heartbeat import live_workers
from streams.runtime import Runtime
from streams.slices.context import SliceContext
from streams.web.health import partition_stalls


class Rates:
    """Per-second rates of counters between two successive /status requests (the page
    refreshes itself, so the rate covers the last refresh interval); None on the first."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: dict[str, tuple[float, float]] = {}

    def rate(self, key: str, total: float) -> float | None:
        now = self._clock()
        previous = self._last.get(key)
        self._last[key] = (now, total)
        if previous is None or now <= previous[0]:
            return None
        return round(max(0.0, total - previous[1]) / (now - previous[0]), 3)


def agent_stats(
    app: faust.App,
    runtime: Runtime,
    consumers: Mapping[str, ContractConsumer[Any]] = {},
    rates: Rates | None = None,
) -> list[dict[str, Any]]:
    """Per agent: messages by result and their rate, DLQ count and reasons, consumer lag per
    assigned partition, and whether it is failing (crashed, or a partition stalled with lag)."""
    samples = runtime.metrics.registry
    stalls = partition_stalls(app, runtime, consumers)
    out = []
    lags = partition_lags(app)
    for name, agent in app.agents.items():
        topics = [t for ch in [agent.channel] for t in getattr(ch, "topics", ())]
        lag = 0
        partitions = []
        for p in lags:
            if p.topic in topics:
                lag += p.lag or 0
                partitions.append(
                    {
                        "partition": f"{p.topic}:{p.partition}",
                        "committed": p.committed,
                        "highwater": p.highwater,
                        "lag": p.lag,
                    }
                )
        per_topic = {}
        for topic in topics:
            per_topic[topic] = {
                result: samples.get_sample_value(
                    "reminders_stream_messages_total",
                    {"topic": topic_label(topic, runtime), "result": result},
                )
                or 0
                for result in ("applied", "noop", "dlq")
            }
        crashed = agent.crash_reason is not None
        stalled = [
            {
                "partition": f"{s.partition.topic}:{s.partition.partition}",
                "lag": s.lag,
                "seconds": s.seconds,
            }
            for s in stalls.get(name, [])
        ]
        consumer = consumers.get(name)
        processed = int(sum(sum(counts.values()) for counts in per_topic.values()))
        dlq_total = int(sum(counts["dlq"] for counts in per_topic.values()))
        out.append(
            {
                "agent": name,
                "topics": topics,
                "processed": processed,
                "rate_per_second": rates.rate(f"agent:{name}", processed) if rates else None,
                "errors": dlq_total,
                "messages": per_topic,
                "lag": lag,
                "partitions": partitions,
                "crashed": crashed,
                "stalled": stalled,
                "failing": crashed or bool(stalled),
                "dlq": consumer.reasons.snapshot() if consumer is not None else None,
            }
        )
    return out


def topic_label(topic: str, runtime: Runtime) -> str:
    prefix = runtime.settings.topic_prefix
    return topic[len(prefix) :] if prefix and topic.startswith(prefix) else topic


def outbox_stats(runtime: Runtime, rates: Rates | None = None) -> dict[str, Any]:
    r = runtime.metrics.registry
    published = int(
        sum(
            s.value
            for m in r.collect()  # merged with the timer process's, where the relay runs
            if m.name == "reminders_outbox_published"
            for s in m.samples
            if s.name.endswith("_total")
        )
    )
    return {
        "backlog": r.get_sample_value("reminders_outbox_backlog"),
        "oldest_unpublished_age_seconds": r.get_sample_value(
            "reminders_outbox_oldest_unpublished_age_seconds"
        ),
        "published": published,
        "publish_rate_per_second": rates.rate("outbox:published", published) if rates else None,
        "publish_errors": r.get_sample_value("reminders_outbox_publish_errors_total"),
        # Rows Kafka refused for good, out of their lanes (python -m streams outbox parked).
        "parked": r.get_sample_value("reminders_outbox_parked_rows"),
        "parked_by_reason": parked_by_reason(r),
    }


def parked_by_reason(registry: Any) -> dict[str, int]:
    """Rows parked since start, by reason (all topics): reminders_outbox_parked_total."""
    out: dict[str, int] = {}
    for family in registry.collect():
        if family.name != "reminders_outbox_parked":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                reason = sample.labels.get("reason", "")
                out[reason] = out.get(reason, 0) + int(sample.value)
    return out


def timer_list(ctx: SliceContext) -> list[dict[str, Any]]:
    """Every schedule of the worker, each from the process that runs it ("process":
    "worker" or "timer"); an isolated one reads as the timer process last reported it."""
    own = ctx.registry.list()
    child = ctx.timer_process
    if child is None:
        return [{**t, "process": "worker"} for t in own]
    theirs = {t["name"]: t for t in child.timers}
    return [
        {
            **theirs.get(t["name"], t),
            "process": "timer",
            "process_ready": child.ready,
            "paused": t.get("paused", False),  # as this registry last read ops.timer_pauses
        }
        if t["name"] in child.names
        else {**t, "process": "worker"}
        for t in own
    ]


def table_stats(app: faust.App, ctx: SliceContext) -> list[dict[str, Any]]:
    """Per changelog-backed table: keys, cache hits and misses, recovery state, and the
    changelog offsets recovered to per partition."""
    recovery = getattr(app.tables, "recovery")  # noqa: B009
    done = bool(recovery.completed.is_set())
    active = getattr(recovery, "active_offsets", {}) or {}
    out = []
    for cache in ctx.caches:
        changelog = cache.table.changelog_topic.get_topic_name()
        offsets = {str(tp.partition): off for tp, off in active.items() if tp.topic == changelog}
        out.append(
            {
                **cache.stats(),
                "recovery": "done" if done else "in progress",
                "changelog_topic": changelog,
                "changelog_offsets": dict(sorted(offsets.items())),
            }
        )
    return out


async def _cluster(ctx: SliceContext) -> dict[str, Any]:
    try:
        return await live_workers(ctx.runtime, ctx.registry.worker_id)
    except (DatabaseUnavailable, InputRejected) as exc:
        return {"workers": [], "error": f"database unavailable ({type(exc).__name__})"}


async def status(ctx: SliceContext, rates: Rates | None = None) -> dict[str, Any]:
    """Everything /status shows, as JSON-able data: the shared sections, then the slices' own
    (a section may be async, e.g. one that reads PostgreSQL)."""
    runtime = ctx.runtime
    sections: dict[str, Any] = {}
    for name, section in ctx.status_sections.items():
        value = section()
        sections[name] = await value if inspect.isawaitable(value) else value
    return {
        "app": runtime.settings.app_id,
        "worker": {"id": ctx.registry.worker_id, "web_port": runtime.settings.web_port},
        "cluster": await _cluster(ctx),
        "agents": agent_stats(ctx.app, runtime, ctx.consumers, rates),
        "tables": table_stats(ctx.app, ctx),
        "timers": timer_list(ctx),
        "outbox": outbox_stats(runtime, rates),
        **sections,
    }
