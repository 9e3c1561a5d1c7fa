"""``/automation/hold``: the rows on support hold with reason, attempts and last error
(HTML for people, ``?format=json`` for tools)."""

from __future__ import annotations

import html
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from faust.web import Request, Response, View

from streams.runtime import Runtime
from streams.slices.automation.support import held_rows

COLUMNS = (
    "scheduler_key",
    "automation_type",
    "status",
    "hold_reason",
    "attempts",
    "interruptions",
    "last_error",
    "input_hash",
    "conflict_input_hash",
    "support_action",
    "support_action_count",
    "updated_on",
)


def render(rows: Sequence[dict[str, Any]]) -> str:
    def cell(value: Any) -> str:
        if value is None:
            return ""
        return html.escape(json.dumps(value) if isinstance(value, dict | list) else str(value))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{cell(r.get(c))}</td>" for c in COLUMNS) + "</tr>" for r in rows
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>automation: rows on hold</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}}th{{background:#f3f3f3}}</style>
</head><body><h1>Automation rows on support hold ({len(rows)})</h1>
<p>Put one back: <code>python -m streams automation release KEY</code> (one more attempt) or
<code>python -m streams automation retry-key KEY</code> (a fresh ladder); see
docs/runbooks/automation-support-hold.md.</p>
<table><tr>{head}</tr>{body}</table>
<p><a href="/automation/hold?format=json">JSON</a> · <a href="/status">status</a></p></body></html>"""


def hold_view(runtime: Runtime, limit: int) -> Callable[[View, Request], Awaitable[Response]]:
    async def view(web: View, request: Request) -> Response:
        rows = await held_rows(await runtime.pool(), limit)
        if request.query.get("format") == "json" or "application/json" in (
            request.headers.get("Accept", "")
        ):
            return web.json({"on_hold": rows, "limit": limit})
        return web.html(render(rows))

    return view
