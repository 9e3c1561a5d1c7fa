"""HTTP routes on the Faust web server: health, Prometheus metrics, timers and status."""

from __future__ import annotations

import time
from typing import Any

from faust.utils import json as faust_json
from faust.web import Request, Response, View
from prometheus_client import generate_latest

from streams.asynctools import Shared
from streams.console import rows_web
from streams.console.layout import STATIC_DIR, STYLESHEET
from streams.explain import explain
from streams.input.lag import FaustStreamSource, refresh
from streams.slices.context import SliceContext
from streams.web.health import partition_stalls, readiness
from streams.web.page import render_html
from streams.web.status import Rates, status, timer_list


class StatusSnapshot:
    """The status data of one moment, its JSON and its page (without forms) made on first use."""

    def __init__(self, data: dict[str, Any], ready: bool, checks: dict[str, Any]) -> None:
        self.data, self.ready, self.checks = data, ready, checks
        self._json: bytes | None = None
        self._html: str | None = None

    def json(self) -> bytes:
        if self._json is None:
            encoded = faust_json.dumps(self.data)  # as web.json would
            self._json = encoded if isinstance(encoded, bytes) else encoded.encode()
        return self._json

    def html(self) -> str:
        if self._html is None:
            self._html = render_html(self.data, self.ready, self.checks)
        return self._html


def register(ctx: SliceContext) -> None:
    app, runtime = ctx.app, ctx.runtime
    from streams.console import web as console_web

    console_web.register(ctx)  # the console's POST routes (off without WEB_ADMIN_TOKEN)
    rates = Rates()
    source = FaustStreamSource(app, ctx.consumers)
    rows_web.register(ctx)  # /console/rows: rows by slice and state, a row's detail

    stylesheet = (STATIC_DIR / "console.css").read_bytes()

    @app.page(STYLESHEET)
    async def style(web: View, request: Request) -> Response:
        return web.bytes(
            stylesheet, content_type="text/css", headers={"Cache-Control": "max-age=3600"}
        )

    @app.page("/health/live")
    async def live(web: View, request: Request) -> Response:
        return web.json({"status": "alive"})

    async def refresh_peer() -> None:
        if ctx.timer_process is not None:
            await ctx.timer_process.refresh()

    # The timer process's snapshot (every timer and metric family, serialized there, parsed
    # here) and the status data are costly: one of each a second at most, however many
    # requests ask (a flood of /status must not take the dispatcher's or the agents' time).
    shared_peer = Shared(refresh_peer, fresh=1.0, stamp=lambda: runtime.generation)

    async def snapshot() -> StatusSnapshot:
        await peer()
        data = await status(ctx, rates)
        ready, checks = await readiness(app, runtime, ctx.consumers, ctx.timer_process, ctx.caches)
        return StatusSnapshot(data, ready, checks)

    # One snapshot a second at most, whoever asks, its JSON and page rendered once
    # each: building and serializing the whole status per request let a flood of /status take
    # the agents' event loop (and the page and the JSON show the same moment).
    shared_status = Shared(snapshot, fresh=1.0, stamp=lambda: runtime.generation)

    async def peer() -> None:
        """The timer process's latest timers and metrics (they join this process's own)."""
        await shared_peer.get()

    @app.page("/health")
    async def health(web: View, request: Request) -> Response:
        ready, checks = await readiness(app, runtime, ctx.consumers, ctx.timer_process, ctx.caches)
        body = {"status": "ready" if ready else "not ready", **checks}
        return web.json(body, status=200 if ready else 503)

    async def exposition() -> bytes:
        partition_stalls(
            app, runtime, ctx.consumers
        )  # refreshes reminders_stream_partitions_stalled
        # Message timestamps are wall time, whatever clock the worker runs its schedules on.
        refresh(runtime.metrics.stream, source, time.time())
        await peer()
        return bytes(generate_latest(runtime.metrics.registry))

    # /metrics is open (scrapers): one exposition every quarter second at most, whoever asks.
    shared_metrics = Shared(exposition, fresh=0.25, stamp=lambda: runtime.generation)

    @app.page("/metrics")
    async def metrics(web: View, request: Request) -> Response:
        # aiohttp refuses a charset inside content_type; the exposition format is UTF-8 anyway.
        return web.bytes(await shared_metrics.get(), content_type="text/plain; version=0.0.4")

    @app.page("/explain/{ident}")
    async def explain_page(web: View, request: Request, ident: str) -> Response:
        found = await explain(runtime, ident)
        if found is None:
            return web.json({"error": "unknown id", "id": ident}, status=404)
        return web.json(found)

    @app.page("/timers")
    async def timers(web: View, request: Request) -> Response:
        await peer()
        await ctx.registry.refresh_pauses()  # one read: a daily job's flag is current too
        return web.json(timer_list(ctx))

    @app.page("/status")
    async def status_page(web: View, request: Request) -> Response:
        wants_json = request.query.get("format") == "json" or "application/json" in (
            request.headers.get("Accept", "")
        )
        now = await shared_status.get()
        if wants_json:
            return web.bytes(now.json(), content_type="application/json")
        csrf = console_web.page_csrf(runtime, request)
        if csrf is None:
            return web.html(now.html())
        # A console session's page carries its own forms: rendered for it.
        return web.html(render_html(now.data, now.ready, now.checks, csrf=csrf))
