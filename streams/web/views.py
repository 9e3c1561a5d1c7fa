"""HTTP routes on the Faust web server: health, Prometheus metrics, and status (JSON and HTML)."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

import faust
from faust.web import Request, Response, View
from prometheus_client import generate_latest

from streams.agents.consumer import ContractConsumer
from streams.runtime import Runtime
from streams.tables.cache import KeyCache
from streams.timers.registry import TimerRegistry
from streams.web.health import partition_stalls, readiness


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


def status(
    app: faust.App,
    runtime: Runtime,
    registry: TimerRegistry,
    caches: Sequence[KeyCache],
    consumers: Mapping[str, ContractConsumer[Any]] = {},
) -> dict[str, Any]:
    return {
        "app": runtime.settings.app_id,
        "agents": agent_stats(app, runtime, consumers),
        "tables": [c.stats() for c in caches],
        "timers": registry.list(),
        "outbox": outbox_stats(runtime),
    }


def render_html(data: dict[str, Any], ready: bool, checks: dict[str, Any]) -> str:
    def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>"
            for r in rows
        )
        return f"<table><tr>{head}</tr>{body}</table>"

    timers = table(
        data["timers"],
        [
            "name",
            "mode",
            "interval_seconds",
            "cron",
            "next_fire_at",
            "last_started_at",
            "last_duration_seconds",
            "last_result",
            "last_error",
            "counts",
            "last_summary",
        ],
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(data["app"])} status</title>
<meta http-equiv="refresh" content="5">
<style>body{{font:14px system-ui,sans-serif;margin:2em}}table{{border-collapse:collapse;margin-bottom:2em}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}}th{{background:#f3f3f3}}
.ok{{color:#070}}.bad{{color:#b00}}</style></head><body>
<h1>{html.escape(data["app"])} <span class="{"ok" if ready else "bad"}">{"ready" if ready else "not ready"}</span></h1>
<p>{html.escape(json.dumps(checks))}</p>
<h2>Agents</h2>{table(data["agents"], ["agent", "topics", "messages", "lag", "failing", "crashed", "stalled", "dlq"])}
<h2>Tables</h2>{table(data["tables"], ["table", "keys", "hits", "misses", "hit_ratio"])}
<h2>Timers</h2>{timers}
<h2>Outbox</h2>{table([data["outbox"]], list(data["outbox"]))}
<p><a href="/status?format=json">JSON</a> · <a href="/metrics">metrics</a> · <a href="/health">health</a></p>
</body></html>"""


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)


def register(
    app: faust.App,
    runtime: Runtime,
    registry: TimerRegistry,
    caches: Sequence[KeyCache] = (),
    consumers: Mapping[str, ContractConsumer[Any]] | None = None,
) -> None:
    inputs: Mapping[str, ContractConsumer[Any]] = consumers or {}

    @app.page("/health/live")
    async def live(web: View, request: Request) -> Response:
        return web.json({"status": "alive"})

    @app.page("/health")
    async def health(web: View, request: Request) -> Response:
        ready, checks = await readiness(app, runtime, inputs)
        body = {"status": "ready" if ready else "not ready", **checks}
        return web.json(body, status=200 if ready else 503)

    @app.page("/metrics")
    async def metrics(web: View, request: Request) -> Response:
        partition_stalls(app, runtime, inputs)  # refreshes stream_partitions_stalled
        # aiohttp refuses a charset inside content_type; the exposition format is UTF-8 anyway.
        return web.bytes(
            generate_latest(runtime.metrics.registry), content_type="text/plain; version=0.0.4"
        )

    @app.page("/timers")
    async def timers(web: View, request: Request) -> Response:
        return web.json(registry.list())

    @app.page("/status")
    async def status_page(web: View, request: Request) -> Response:
        data = status(app, runtime, registry, caches, inputs)
        wants_json = request.query.get("format") == "json" or "application/json" in (
            request.headers.get("Accept", "")
        )
        if wants_json:
            return web.json(data)
        ready, checks = await readiness(app, runtime, inputs)
        return web.html(render_html(data, ready, checks))
