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
from pathlib import Path
from typing import Any

NAV = (
    ("/status", "overview"),
    ("/console/rows", "rows"),
    ("/console/dlq", "dead letters"),
    ("/timers", "timers"),
    ("/metrics", "metrics"),
)

STYLESHEET = "/static/console.css"
"""The pages' one style sheet (streams/console/static/console.css): a file, not inline, so the
pages' Content-Security-Policy allows no inline style (streams/web/guard.py)."""
STATIC_DIR = Path(__file__).resolve().parent / "static"


def shell(
    title: str, body: str, *, header_extra: str = "", refresh_seconds: int | None = None
) -> str:
    """A whole page: ``title`` (escaped here), ``body`` and ``header_extra`` (already HTML)."""
    refresh = f'<meta http-equiv="refresh" content="{refresh_seconds}">' if refresh_seconds else ""
    nav = "".join(f'<a href="{href}">{esc(label)}</a>' for href, label in NAV)
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>{esc(title)}</title>{refresh}
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="{STYLESHEET}"></head><body>
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
