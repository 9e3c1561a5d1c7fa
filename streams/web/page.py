"""The human status page: the /status data rendered as HTML (no build step, refreshes itself).

Every value printed is escaped. Every value cell carries ``data-k`` = its path in the JSON of
``/status?format=json`` (e.g. ``outbox.backlog``, ``agents.0.partitions.1.lag``), so a browser
test can check that the page shows the same numbers as the JSON.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from typing import Any

SHARED = ("app", "worker", "cluster", "agents", "tables", "timers", "outbox")

AGENT_COLUMNS = ("agent", "processed", "rate_per_second", "errors", "lag", "failing", "crashed")
PARTITION_COLUMNS = ("partition", "committed", "highwater", "lag")
TABLE_COLUMNS = (
    "table",
    "keys",
    "hits",
    "misses",
    "hit_ratio",
    "recovery",
    "changelog_topic",
    "changelog_offsets",
)
TIMER_COLUMNS = (
    "name",
    "process",
    "mode",
    "interval_seconds",
    "cron",
    "running",
    "next_fire_at",
    "last_started_at",
    "last_duration_seconds",
    "last_result",
    "last_error",
)
TIMER_COUNTS = ("runs", "failed", "timed_out", "missed", "deduped", "wakes")
OUTBOX_COLUMNS = (
    "backlog",
    "oldest_unpublished_age_seconds",
    "published",
    "publish_rate_per_second",
    "publish_errors",
    "parked",
)

STYLE = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2329;background:#f6f7f9}
header{background:#1d2329;color:#fff;padding:14px 24px;display:flex;gap:16px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:20px;margin:0}header a{color:#9cc3ff}main{padding:8px 24px 32px}
h2{font-size:16px;margin:24px 0 8px}h3{font-size:13px;margin:12px 0 4px;color:#555}
.badge{padding:2px 10px;border-radius:10px;font-weight:600;font-size:13px}
.ok{background:#d8f3dc;color:#0a5c26}.bad{background:#ffd9d9;color:#8a0c0c}.dim{color:#8a939c}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0001;margin-bottom:8px}
td,th{border-bottom:1px solid #e6e8eb;padding:5px 10px;text-align:left;vertical-align:top}
th{background:#eef0f3;font-weight:600;font-size:12px;color:#444}
td.n{text-align:right;font-variant-numeric:tabular-nums}tr.fail td{background:#fff1f1}
.kv th{width:220px}td.summary{font-size:12px;color:#555;padding-left:24px;border-bottom:1px solid #ccd}
td{white-space:nowrap}td.small,td.summary{white-space:normal}.small{font-size:12px;color:#555;max-width:520px;word-break:break-word}
"""


def render_html(data: dict[str, Any], ready: bool, checks: dict[str, Any]) -> str:
    app = html.escape(str(data.get("app", "")))
    worker = data.get("worker") or {}
    agents = data.get("agents", [])
    agent_rows = "".join(
        _row(agent, AGENT_COLUMNS, f"agents.{i}", fail=bool(agent.get("failing")))
        for i, agent in enumerate(agents)
    )
    partitions = "".join(
        f"<h3>{_esc(agent.get('agent'))}: lag per partition</h3>"
        + _table(
            PARTITION_COLUMNS,
            "".join(
                _row(p, PARTITION_COLUMNS, f"agents.{i}.partitions.{j}")
                for j, p in enumerate(agent.get("partitions") or [])
            ),
        )
        for i, agent in enumerate(agents)
        if agent.get("partitions")
    )
    dlq = "".join(
        f"<h3>{_esc(agent.get('agent'))}: dead letters</h3>" + _kv(agent["dlq"], f"agents.{i}.dlq")
        for i, agent in enumerate(agents)
        if agent.get("dlq")
    )
    tables = "".join(
        _row(t, TABLE_COLUMNS, f"tables.{i}") for i, t in enumerate(data.get("tables", []))
    )
    timer_head = TIMER_COLUMNS + TIMER_COUNTS
    timers = "".join(_timer_row(t, f"timers.{i}") for i, t in enumerate(data.get("timers", [])))
    extra = "".join(
        f"<h2>{_esc(name)}</h2>{_any(value, name)}"
        for name, value in data.items()
        if name not in SHARED
    )
    cluster = _cluster(data.get("cluster"))
    badge = (
        '<span class="badge ok">ready</span>'
        if ready
        else '<span class="badge bad">not ready</span>'
    )
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>{app} status</title><meta http-equiv="refresh" content="5">
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style></head><body>
<header><h1>{app}</h1>{badge}<span>worker <b data-k="worker.id">{_esc(worker.get("id"))}</b></span>
<span class="dim">refreshes every 5 s</span>
<span><a href="/status?format=json">JSON</a> · <a href="/metrics">metrics</a> · <a href="/health">health</a> · <a href="/timers">timers</a></span></header>
<main>
<h2>Health</h2>{_kv(checks, "health")}
{cluster}
<h2>Agents</h2>{_table(AGENT_COLUMNS, agent_rows)}{partitions}{dlq}
<h2>Tables</h2>{_table(TABLE_COLUMNS, tables)}
<h2>Schedules</h2>{_table(timer_head, timers)}
<h2>Outbox</h2>{_kv({k: data.get("outbox", {}).get(k) for k in OUTBOX_COLUMNS}, "outbox")}
{extra}
</main></body></html>"""


def _cluster(cluster: Any) -> str:
    if not cluster:
        return ""
    rows = "".join(
        "<tr>"
        + _td(w.get("id"), f"cluster.workers.{i}.id")
        + f'<td><a href="{_esc(w.get("url"))}">{_esc(w.get("url"))}</a></td>'
        + _td(w.get("seen"), f"cluster.workers.{i}.seen")
        + "</tr>"
        for i, w in enumerate(cluster.get("workers", []))
    )
    return "<h2>Cluster</h2>" + _table(("worker", "status page", "seen as"), rows)


def _timer_row(timer: dict[str, Any], path: str) -> str:
    counts = timer.get("counts") or {}
    fail = timer.get("last_result") not in (None, "ok")
    cells = "".join(_td(timer.get(c), f"{path}.{c}") for c in TIMER_COLUMNS)
    cells += "".join(_td(counts.get(c), f"{path}.counts.{c}") for c in TIMER_COUNTS)
    summary = timer.get("last_summary")
    if isinstance(summary, dict):
        summary = " ".join(f"{k}={_text(v)}" for k, v in summary.items() if v not in (None, [], {}))
    width = len(TIMER_COLUMNS) + len(TIMER_COUNTS)
    last = (
        f'<tr><td colspan="{width}" class="summary">last summary: {_esc(_text(summary))}</td></tr>'
    )
    return f'<tr class="{"fail" if fail else ""}">{cells}</tr>' + (last if summary else "")


def _table(columns: Sequence[str], rows: str) -> str:
    head = "".join(f"<th>{_esc(c.replace('_', ' '))}</th>" for c in columns)
    if not rows:
        rows = f'<tr><td colspan="{len(columns)}" class="dim">none</td></tr>'
    return f"<table><tr>{head}</tr>{rows}</table>"


def _row(item: dict[str, Any], columns: Sequence[str], path: str, fail: bool = False) -> str:
    cells = "".join(_td(item.get(c), f"{path}.{c}") for c in columns)
    return f'<tr class="{"fail" if fail else ""}">{cells}</tr>'


def _kv(values: dict[str, Any], path: str) -> str:
    rows = "".join(
        f"<tr><th>{_esc(k.replace('_', ' '))}</th>{_td(v, f'{path}.{k}')}</tr>"
        for k, v in values.items()
    )
    return f'<table class="kv">{rows}</table>'


def _any(value: Any, path: str) -> str:
    """A slice's section: a dict as key/value rows (lists of dicts inside as tables)."""
    if isinstance(value, dict):
        scalars = {k: v for k, v in value.items() if not _is_rows(v)}
        out = _kv(scalars, path) if scalars else ""
        for k, v in value.items():
            if _is_rows(v):
                out += f"<h3>{_esc(k)}</h3>{_any(v, f'{path}.{k}')}"
        return out
    if _is_rows(value):
        columns = list(dict.fromkeys(c for row in value for c in row))
        rows = "".join(_row(r, columns, f"{path}.{i}") for i, r in enumerate(value))
        return _table(columns, rows)
    return f"<table><tr>{_td(value, path)}</tr></table>"


def _is_rows(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _td(value: Any, path: str) -> str:
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    cls = ' class="n"' if numeric else (' class="small"' if isinstance(value, dict | list) else "")
    return f'<td{cls} data-k="{_esc(path)}">{_esc(_text(value))}</td>'


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if not value.is_integer() else str(int(value))
    if isinstance(value, dict | list):
        return json.dumps(value, default=str, separators=(", ", ": "))
    text = str(value)
    if _INSTANT.match(text):  # an ISO instant, to the second: 2026-12-01 05:45:01Z
        return text[:10] + " " + text[11:19] + "Z"
    return text


_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)$")


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)
