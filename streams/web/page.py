"""The human status page: the /status data rendered as HTML on the console's shell (no build step, refreshes itself).

From the top: the worst problem of the moment (streams/web/problems.py) or "all clear", one
card per slice with its counts and its last hour as charts, then the worker's tables (health,
cluster, agents, partitions, dead letters, tables, schedules, outbox). Every value printed is
escaped, an empty value prints blank and a ``*_seconds`` value humanized (exact figure in the
cell's ``title``). Every value cell carries ``data-k`` = its path in the JSON of
``/status?format=json`` (e.g. ``outbox.backlog``, ``agents.0.partitions.1.lag``), so a browser
test can check that the page shows the same numbers as the JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streams.console.chart import Series, svg
from streams.console.layout import esc, humanize_seconds, shell, table, td, text
from streams.web.problems import Problem, problems

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
    "paused",
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
ACTIVITY = "activity"


def render_html(
    data: dict[str, Any], ready: bool, checks: dict[str, Any], csrf: str | None = None
) -> str:
    """The overview; with ``csrf`` (a console session: streams/console/web.py ``page_csrf``)
    each schedule row carries its pause or resume form."""
    app = str(data.get("app", ""))
    worker = data.get("worker") or {}
    agents = data.get("agents") or []
    agent_rows = "".join(
        _row(agent, AGENT_COLUMNS, f"agents.{i}", fail=bool(agent.get("failing")))
        for i, agent in enumerate(agents)
    )
    partitions = "".join(
        f"<div><h3>{esc(agent.get('agent'))}: lag per partition</h3>"
        + table(
            PARTITION_COLUMNS,
            "".join(
                _row(p, PARTITION_COLUMNS, f"agents.{i}.partitions.{j}")
                for j, p in enumerate(agent.get("partitions") or [])
            ),
        )
        + "</div>"
        for i, agent in enumerate(agents)
        if agent.get("partitions")
    )
    dlq = "".join(
        f"<div><h3>{esc(agent.get('agent'))}: dead letters</h3>"
        + _kv(agent["dlq"], f"agents.{i}.dlq")
        + "</div>"
        for i, agent in enumerate(agents)
        if isinstance(agent.get("dlq"), dict) and any(text(v) for v in agent["dlq"].values())
    )
    tables = "".join(
        _row(t, TABLE_COLUMNS, f"tables.{i}") for i, t in enumerate(data.get("tables") or [])
    )
    timers = "".join(
        _timer_row(t, f"timers.{i}", csrf) for i, t in enumerate(data.get("timers") or [])
    )
    slices = "".join(_slice(name, value) for name, value in data.items() if name not in SHARED)
    outbox = data.get("outbox") or {}
    badge = (
        '<span class="badge ok">ready</span>'
        if ready
        else '<span class="badge bad">not ready</span>'
    )
    header = (
        f'{badge}<span>worker <b data-k="worker.id">{esc(worker.get("id"))}</b></span>'
        # Logged in, the page carries forms: it does not reload under a reason being typed.
        + (
            '<span class="dim">logged in: reload to refresh</span>'
            if csrf
            else '<span class="dim">refreshes every 5 s</span>'
        )
        + '<span><a href="/status?format=json">JSON</a> · <a href="/health">health</a></span>'
    )
    body = (
        banner(problems(data, ready, checks))
        + (f'<h2>Slices</h2><div class="slices">{slices}</div>' if slices else "")
        + f'<h2 id="health">Health</h2>{_kv(checks, "health")}'
        + _cluster(data.get("cluster"))
        + f'<h2 id="agents">Agents</h2>{table(AGENT_COLUMNS, agent_rows)}'
        + f'<div class="grid">{partitions}</div><div class="grid">{dlq}</div>'
        + f"<h2>Tables</h2>{table(TABLE_COLUMNS, tables)}"
        + '<h2 id="schedules">Schedules</h2>'
        + table(TIMER_COLUMNS + TIMER_COUNTS + (("on every worker",) if csrf else ()), timers)
        + '<h2 id="outbox">Outbox</h2>'
        + _kv({k: outbox.get(k) for k in OUTBOX_COLUMNS}, "outbox")
    )
    return shell(f"{app} status", body, header_extra=header, refresh_seconds=None if csrf else 5)


def banner(found: Sequence[Problem]) -> str:
    """The worst problem with a link to where to look, and how many more; or all clear."""
    if not found:
        return (
            '<div class="banner clear" id="banner" data-problems="0"><b>All clear</b>'
            '<span class="dim">no stalled partition, held or parked row, failed run or '
            "failing check</span></div>"
        )
    worst, rest = found[0], found[1:]
    more = (
        '<ul class="more">'
        + "".join(
            f'<li><a href="{esc(p.href)}">{esc(p.title)}</a> <span class="dim">'
            f"{esc(p.detail)}</span></li>"
            for p in rest
        )
        + "</ul>"
        if rest
        else ""
    )
    return (
        f'<div class="banner problem" id="banner" data-problems="{len(found)}">'
        f'<b><a href="{esc(worst.href)}">{esc(worst.title)}</a></b>'
        f"<span>{esc(worst.detail)}</span>"
        + (f'<span class="dim">and {len(rest)} more</span>' if rest else "")
        + f"{more}</div>"
    )


def _slice(name: str, value: Any) -> str:
    """One slice's card: its counts, its charts, then its rows (e.g. those on hold)."""
    title = f"<h3>{esc(name.replace('_', ' '))}</h3>"
    if _is_rows(value):
        return f'<section class="slice wide" id="{esc(name)}">{title}{_rows(value, name)}</section>'
    if not isinstance(value, dict):
        return f'<section class="slice" id="{esc(name)}">{title}<table><tr>{td(value, name)}</tr></table></section>'
    scalars = {k: v for k, v in value.items() if k != ACTIVITY and not _is_rows(v)}
    counts = _kv(scalars, name) if scalars else ""
    activity = value.get(ACTIVITY)
    if isinstance(activity, dict):
        graphs, figures = charts(activity, f"{name}.{ACTIVITY}")
        out = f'{graphs}<div class="grid">{counts}{figures}</div>'
    else:
        out = counts
    for k, v in value.items():
        if _is_rows(v):
            out += f"<h4>{esc(k.replace('_', ' '))}</h4>{_rows(v, f'{name}.{k}')}"
    return f'<section class="slice" id="{esc(name)}">{title}{out}</section>'


def _rows(rows: list[dict[str, Any]], path: str) -> str:
    columns = list(dict.fromkeys(c for row in rows for c in row))
    return table(columns, "".join(_row(r, columns, f"{path}.{i}") for i, r in enumerate(rows)))


def charts(activity: dict[str, Any], path: str) -> tuple[str, str]:
    """The last hour of a slice's output records: published per minute (bars) with the
    backlog left at each minute's end (line), and the p95 wait per minute; then the
    window's figures (published, backlog now, worst p95, capped) as a table."""
    if "error" in activity:
        return f'<p class="dim" data-k="{esc(path)}.error">{esc(activity["error"])}</p>', ""
    minutes = activity.get("minutes") or []
    published = [m.get("published") for m in minutes]
    backlog = [m.get("backlog") for m in minutes]
    waits = [m.get("wait_p95_seconds") for m in minutes]
    # A slice whose ledger knows each item's due time adds its lateness (calendar: DueAt ->
    # SentAt), drawn beside the outbox wait.
    late = any("lateness_p95_seconds" in m for m in minutes)
    lateness = [m.get("lateness_p95_seconds") for m in minutes]
    window = activity.get("window_minutes") or len(minutes)
    labels = (f"-{window} min", "now")
    keys: tuple[str, ...] = ("published", "backlog", "worst_wait_p95_seconds", "capped")
    if late:
        keys += ("worst_lateness_p95_seconds", "lateness_capped")
    figures = {k: activity.get(k) for k in keys}
    wait_series = [Series("p95 wait", waits, "line", "#b3261e")]
    if late:
        wait_series.append(Series("p95 lateness (due -> sent)", lateness, "line", "#6a3fb5"))
    graphs = (
        '<div class="charts">'
        + svg(
            "records per minute: published, backlog",
            [
                Series("published / min", published, "bar", "#4b7bd1"),
                Series("backlog", backlog, "line", "#e07b24"),
            ],
            x_labels=labels,
            data_k=f"{path}.minutes",
        )
        + svg(
            "p95 wait per minute (written to published)"
            + (", p95 lateness per minute of due time" if late else ""),
            wait_series,
            seconds=True,
            x_labels=labels,
            data_k=f"{path}.minutes.wait_p95_seconds",
        )
        + "</div>"
    )
    return graphs, _kv(figures, path, caption=f"last {window} min")


def _cluster(cluster: Any) -> str:
    if not cluster:
        return ""
    rows = "".join(
        "<tr>"
        + td(w.get("id"), f"cluster.workers.{i}.id")
        + f'<td><a href="{esc(w.get("url"))}">{esc(w.get("url"))}</a></td>'
        + td(w.get("seen"), f"cluster.workers.{i}.seen")
        + "</tr>"
        for i, w in enumerate(cluster.get("workers") or [])
    )
    return "<h2>Cluster</h2>" + table(("worker", "status page", "seen as"), rows)


def _timer_row(timer: dict[str, Any], path: str, csrf: str | None = None) -> str:
    counts = timer.get("counts") or {}
    fail = timer.get("last_result") not in (None, "ok")
    cells = "".join(td(timer.get(c), f"{path}.{c}", key=c) for c in TIMER_COLUMNS)
    cells += "".join(td(counts.get(c), f"{path}.counts.{c}", key=c) for c in TIMER_COUNTS)
    if csrf:
        cells += (
            f"<td>{_pause_form(str(timer.get('name', '')), bool(timer.get('paused')), csrf)}</td>"
        )
    summary = timer.get("last_summary")
    if isinstance(summary, dict):
        summary = " ".join(f"{k}={_short(k, v)}" for k, v in summary.items() if text(v))
    width = len(TIMER_COLUMNS) + len(TIMER_COUNTS) + (1 if csrf else 0)
    last = f'<tr><td colspan="{width}" class="summary">last summary: {esc(text(summary))}</td></tr>'
    return f'<tr class="{"fail" if fail else ""}">{cells}</tr>' + (last if text(summary) else "")


def _pause_form(name: str, paused: bool, csrf: str) -> str:
    """POST /console/actions/timers/pause|resume (streams/console/web.py), with a reason."""
    verb = "resume" if paused else "pause"
    return (
        f'<form class="inline" method="post" action="/console/actions/timers/{verb}">'
        f'<input type="hidden" name="schedule" value="{esc(name)}">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        f'<input name="reason" maxlength="1000" placeholder="reason" aria-label="reason to {verb} {esc(name)}">'
        f'<button type="submit" data-action="{verb}">{verb}</button></form>'
    )


def _short(key: str, value: Any) -> str:
    if key.endswith("_seconds") and isinstance(value, int | float) and not isinstance(value, bool):
        return humanize_seconds(float(value))
    return text(value)


def _row(item: dict[str, Any], columns: Sequence[str], path: str, fail: bool = False) -> str:
    cells = "".join(td(item.get(c), f"{path}.{c}", key=c) for c in columns)
    return f'<tr class="{"fail" if fail else ""}">{cells}</tr>'


def _kv(values: dict[str, Any], path: str, caption: str = "") -> str:
    rows = ""
    for k, v in values.items():
        label = f"<th>{esc(k.replace('_', ' '))}</th>"
        if isinstance(v, dict) and v and not _is_rows(v):
            inner = "".join(
                f"<tr><th>{esc(str(ik).replace('_', ' '))}</th>"
                f"{td(iv, f'{path}.{k}.{ik}', key=str(ik))}</tr>"
                for ik, iv in v.items()
            )
            rows += f'<tr>{label}<td><table class="kv inner">{inner}</table></td></tr>'
        else:
            rows += f"<tr>{label}{td(v, f'{path}.{k}', key=k)}</tr>"
    head = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f'<table class="kv">{head}{rows}</table>'


def _is_rows(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)
