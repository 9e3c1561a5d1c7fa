"""The console's dead letters: ``GET /console/dlq`` (the input topics; with ``?topic=`` the
newest records of its DLQ by reason, bounded, never values; ``?format=json`` as data) and
``POST /console/dlq/replay`` (one record, by partition and offset, or every record of one
reason, through the replay path; token and CSRF as every console action; audited)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from aiokafka.errors import KafkaError
from faust.web import Request, Response, View

from db import console_audit
from db.connector import connection
from streams.console import auth
from streams.console.layout import esc, shell, table, td
from streams.dlq.browse import clamp_limit
from streams.dlq.browser import Busy, DlqBrowser
from streams.dlq.replay import replay_dlq
from streams.dlq.rules import ReplayUsageError, input_topic_names
from streams.runtime import Runtime
from streams.slices.context import SliceContext

PAGE = "/console/dlq"
REPLAY = "/console/dlq/replay"


def _hidden(**fields: Any) -> str:
    return "".join(
        f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in fields.items()
    )


def _replay_form(csrf: str, label: str, **fields: Any) -> str:
    return (
        f'<form class="inline" method="post" action="{REPLAY}">{_hidden(csrf=csrf, **fields)}'
        f'<button type="submit">{esc(label)}</button></form>'
    )


def render(data: dict[str, Any], csrf: str | None) -> str:
    topic = data["topic"]
    counts = "".join(
        f'<tr><td><a href="{PAGE}?{esc(urlencode({"topic": topic, "reason": r}))}">{esc(r)}</a>'
        f"</td>{td(n, f'by_reason.{r}')}"
        + (f"<td>{_replay_form(csrf, 'replay these', topic=topic, reason=r)}</td>" if csrf else "")
        + "</tr>"
        for r, n in data["by_reason"].items()
    )
    cols = ["at", "partition", "offset", "kind", "reason", "replay"]
    rows = ""
    for i, e in enumerate(data["entries"]):
        cells = "".join(td(e[c], f"entries.{i}.{c}") for c in cols)
        if csrf and e["replay"] == "yes":
            form = _replay_form(
                csrf, "replay", topic=topic, partition=e["partition"], offset=e["offset"]
            )
            cells += f"<td>{form}</td>"
        rows += f"<tr>{cells}</tr>"
    head = (
        f"<p>{esc(data['dlq_topic'])}: {data['records']} records; the newest {data['read']} "
        "read back from the end of each partition (counts cover those). Values are never shown.</p>"
    )
    return (
        head
        + "<h2>by reason</h2>"
        + table(["reason", "records", *(["replay"] if csrf else [])], counts)
        + "<h2>newest</h2>"
        + table([*cols, *(["replay"] if csrf else [])], rows)
    )


def register(
    ctx: SliceContext,
    token_of: Callable[[Runtime], str],
    page_csrf: Callable[[Runtime, Request], str | None],
    answer: Callable[..., Response],
) -> None:
    """Called by streams/console/web.py, which owns the token, session and answer shapes."""
    app, runtime = ctx.app, ctx.runtime
    settings = runtime.settings
    browser = DlqBrowser(settings)  # one pair of Kafka clients for every browse of this worker
    runtime.on_close(browser.close)

    @app.page(PAGE)
    class DeadLetters(View):
        async def get(self, request: Request, **kwargs: Any) -> Response:
            topic = request.query.get("topic")
            if not topic:
                links = "".join(
                    f'<li><a href="{PAGE}?{esc(urlencode({"topic": t}))}">{esc(t)}.dlq</a></li>'
                    for t in input_topic_names()
                )
                return self.html(shell("dead letters", f"<ul>{links}</ul>"))
            try:
                limit = clamp_limit(int(request.query.get("limit") or 50))
                found = await browser.browse(
                    topic, reason=request.query.get("reason") or None, limit=limit
                )
            except Busy as exc:
                return self.json({"error": str(exc)}, status=503, headers={"Retry-After": "1"})
            except (ValueError, ReplayUsageError) as exc:
                return self.json({"error": str(exc)}, status=400)
            except (KafkaError, TimeoutError, OSError) as exc:
                return self.json({"error": f"Kafka: {type(exc).__name__}"}, status=503)
            data = {"topic": topic, **found.view()}
            if request.query.get("format") == "json":
                return self.json(data)
            return self.html(shell("dead letters", render(data, page_csrf(runtime, request))))

    @app.page(REPLAY)
    class Replay(View):
        async def post(self, request: Request, **kwargs: Any) -> Response:
            form = await request.post()
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
            verdict = auth.authorize(
                token_of(runtime),
                request.headers,
                request.cookies.get(auth.COOKIE),
                fields.get("csrf"),
                time.time(),
            )
            if not verdict.allowed:
                return answer(self, request, verdict.status, verdict.reason)
            topic, reason = fields.get("topic", ""), fields.get("reason") or None
            try:
                record = (
                    (int(fields["partition"]), int(fields["offset"]))
                    if "partition" in fields
                    else None
                )
                if record is None and reason is None:
                    raise ValueError("give partition and offset (one record) or a reason")
                result = await replay_dlq(settings, topic, reason=reason, record=record)
            except (ValueError, KeyError, ReplayUsageError) as exc:
                return answer(self, request, 400, str(exc))
            except (KafkaError, TimeoutError, OSError) as exc:
                return answer(self, request, 503, f"Kafka: {type(exc).__name__}")
            target = f"{result.dlq_topic}:" + (
                f"{record[0]}:{record[1]}" if record is not None else "reason"
            )
            async with connection(await runtime.pool()) as conn:
                audit_id = await console_audit.record(
                    conn,
                    runtime.clock.now(),
                    verdict.actor,
                    "dlq-replay",
                    "dlq",
                    target,
                    reason or "",
                    "changed" if result.replayed else "unchanged",
                    {"replayed": result.replayed, "skipped": dict(result.skipped)},
                )
            text = f"replayed {result.replayed} of {result.read} read (audit {audit_id})"
            return answer(self, request, 200, text, replayed=result.replayed, audit_id=audit_id)
