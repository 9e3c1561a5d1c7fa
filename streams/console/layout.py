"""The HTML shell every operator page shares: header with navigation, style, and cells.

Every value printed is escaped. Empty values (None, ``[]``, ``{}``, ``""``) print blank;
instants print to the second in UTC; a ``*_seconds`` value prints humanized (``2 min 5 s``)
with the exact figure in its ``title``.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from typing import Any

NAV = (
    ("/status", "overview"),
    ("/console/rows", "rows"),
    ("/console/dlq", "dead letters"),
    ("/timers", "timers"),
    ("/metrics", "metrics"),
)

STYLE = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2329;background:#f6f7f9}
header{background:#1d2329;color:#fff;padding:14px 24px;display:flex;gap:16px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:20px;margin:0}header a{color:#9cc3ff}main{padding:8px 24px 32px}
nav a{margin-right:12px}
h2{font-size:16px;margin:24px 0 8px}h3{font-size:13px;margin:12px 0 4px;color:#555}
.badge{padding:2px 10px;border-radius:10px;font-weight:600;font-size:13px}
.ok{background:#d8f3dc;color:#0a5c26}.bad{background:#ffd9d9;color:#8a0c0c}.dim{color:#8a939c}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0001;margin-bottom:8px}
td,th{border-bottom:1px solid #e6e8eb;padding:5px 10px;text-align:left;vertical-align:top}
th{background:#eef0f3;font-weight:600;font-size:12px;color:#444}
td.n{text-align:right;font-variant-numeric:tabular-nums}tr.fail td{background:#fff1f1}
.kv th{width:220px}td.summary{font-size:12px;color:#555;padding-left:24px;border-bottom:1px solid #ccd}
td{white-space:nowrap}td.small,td.summary{white-space:normal}.small{font-size:12px;color:#555;max-width:520px;word-break:break-word}
form.inline{display:inline-block;margin:0 8px 8px 0}
.hscroll{overflow-x:auto;max-width:100%}
.banner{margin:16px 0 8px;padding:12px 16px;border-radius:6px;display:flex;gap:12px;align-items:baseline;flex-wrap:wrap;font-size:15px}
.banner.clear{background:#d8f3dc;color:#0a5c26}.banner.problem{background:#ffd9d9;color:#8a0c0c;border-left:6px solid #b3261e}
.banner a{color:inherit}.banner ul.more{flex-basis:100%;margin:4px 0 0;padding-left:18px;font-size:13px}
.slices{display:flex;flex-wrap:wrap;gap:16px}.slice{background:#fff;box-shadow:0 1px 2px #0002;padding:8px 14px 12px;border-radius:6px}
.slice.wide{flex-basis:100%}.grid{display:flex;flex-wrap:wrap;gap:0 20px;align-items:flex-start}
.slice .kv th{width:160px}.slice h3{font-size:15px;color:#1d2329;margin:4px 0 8px;text-transform:capitalize}.slice table{box-shadow:none}
.charts{display:flex;gap:12px;flex-wrap:wrap;margin:8px 0}svg.chart{background:#fbfcfd;border:1px solid #e6e8eb;border-radius:4px}
svg.chart text{font:10px system-ui,sans-serif;fill:#5b646d}table.inner th{width:auto}caption{text-align:left;font-size:12px;color:#8a939c}
"""


def shell(
    title: str, body: str, *, header_extra: str = "", refresh_seconds: int | None = None
) -> str:
    """A whole page: ``title`` (escaped here), ``body`` and ``header_extra`` (already HTML)."""
    refresh = f'<meta http-equiv="refresh" content="{refresh_seconds}">' if refresh_seconds else ""
    nav = "".join(f'<a href="{href}">{esc(label)}</a>' for href, label in NAV)
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>{esc(title)}</title>{refresh}
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style></head><body>
<header><h1>{esc(title)}</h1>{header_extra}<nav>{nav}</nav></header>
<main>{body}</main></body></html>"""


def table(columns: Sequence[str], rows: str) -> str:
    head = "".join(f"<th>{esc(c.replace('_', ' '))}</th>" for c in columns)
    if not rows:
        rows = f'<tr><td colspan="{len(columns)}" class="dim">none</td></tr>'
    return f"<table><tr>{head}</tr>{rows}</table>"


def td(value: Any, path: str, *, key: str = "") -> str:
    """One cell; ``path`` is its place in the page's JSON (``data-k``) for browser tests."""
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    cls = ' class="n"' if numeric else (' class="small"' if isinstance(value, dict | list) else "")
    if numeric and key.endswith("_seconds"):
        return f'<td{cls} data-k="{esc(path)}" title="{esc(text(value))}">{esc(humanize_seconds(float(value)))}</td>'
    return f'<td{cls} data-k="{esc(path)}">{esc(text(value))}</td>'


def text(value: Any) -> str:
    if value is None or value == [] or value == {}:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if not value.is_integer() else str(int(value))
    if isinstance(value, dict | list):
        return json.dumps(value, default=str, separators=(", ", ": "))
    out = str(value)
    if _INSTANT.match(out):  # an ISO instant, to the second: 2026-12-01 05:45:01Z
        return out[:10] + " " + out[11:19] + "Z"
    return out


def humanize_seconds(seconds: float) -> str:
    """``0.25`` → ``250 ms``, ``75`` → ``1 min 15 s``, ``90000`` → ``1 d 1 h``."""
    if seconds < 0:
        return "-" + humanize_seconds(-seconds)
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s".replace(".0 s", " s")
    whole = int(seconds)
    for unit, size, sub, sub_size in (
        ("d", 86400, "h", 3600),
        ("h", 3600, "min", 60),
        ("min", 60, "s", 1),
    ):
        if whole >= size:
            major, rest = divmod(whole, size)
            minor = rest // sub_size
            return f"{major} {unit}" + (f" {minor} {sub}" if minor else "")
    return f"{whole} s"  # pragma: no cover - the loop always returns for whole >= 60


_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)$")


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)
