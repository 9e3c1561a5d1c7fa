"""What /status reports, as data: agents, tables, timers, outbox, and each slice's sections."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import faust

from streams.agents.consumer import ContractConsumer
from streams.runtime import Runtime
from streams.slices.context import SliceContext
from streams.web.health import partition_stalls


def agent_stats(
    app: faust.App, runtime: Runtime, consumers: Mapping[str, ContractConsumer[Any]] = {}
) -> list[dict[str, Any]]:
    """Per agent: messages by result, DLQ count and reasons, consumer lag over its assigned
    partitions, and whether it is failing (crashed, or a partition stalled with lag)."""
    samples = runtime.metrics.registry
    stalls = partition_stalls(app, runtime, consumers)
    out = []
    assigned = app.consumer.assignment() if app.consumer.started else set()
    for name, agent in app.agents.items():
        topics = [t for ch in [agent.channel] for t in getattr(ch, "topics", ())]
        lag = 0
        for tp in assigned:
            if tp.topic in topics:
                high = app.consumer.highwater(tp)
                committed = getattr(app.consumer, "_committed_offset", {}).get(tp)
                if high is not None and committed is not None:
                    lag += max(0, high - committed)
        per_topic = {}
        for topic in topics:
            per_topic[topic] = {
                result: samples.get_sample_value(
                    "stream_messages_total",
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
        out.append(
            {
                "agent": name,
                "topics": topics,
                "messages": per_topic,
                "lag": lag,
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


def outbox_stats(runtime: Runtime) -> dict[str, Any]:
    r = runtime.metrics.registry
    return {
        "backlog": r.get_sample_value("outbox_backlog"),
        "oldest_unpublished_age_seconds": r.get_sample_value(
            "outbox_oldest_unpublished_age_seconds"
        ),
        "publish_errors": r.get_sample_value("outbox_publish_errors_total"),
    }


async def status(ctx: SliceContext) -> dict[str, Any]:
    """Everything /status shows, as JSON-able data: the shared sections, then the slices' own
    (a section may be async, e.g. one that reads PostgreSQL)."""
    runtime = ctx.runtime
    sections: dict[str, Any] = {}
    for name, section in ctx.status_sections.items():
        value = section()
        sections[name] = await value if inspect.isawaitable(value) else value
    return {
        "app": runtime.settings.app_id,
        "agents": agent_stats(ctx.app, runtime, ctx.consumers),
        "tables": [c.stats() for c in ctx.caches],
        "timers": ctx.registry.list(),
        "outbox": outbox_stats(runtime),
        **sections,
    }
