"""The human status page: the /status data rendered as HTML (every value escaped)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any


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
    shared = {"app", "agents", "tables", "timers", "outbox"}
    extra = "".join(
        f"<h2>{html.escape(name)}</h2><pre>{html.escape(_cell(value))}</pre>"
        for name, value in data.items()
        if name not in shared
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
{extra}
<p><a href="/status?format=json">JSON</a> · <a href="/metrics">metrics</a> · <a href="/health">health</a></p>
</body></html>"""


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)
