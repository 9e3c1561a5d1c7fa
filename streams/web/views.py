"""HTTP routes on the Faust web server: /health, /health/live, /metrics."""

from __future__ import annotations

import faust
from faust.web import Request, Response, View
from prometheus_client import generate_latest

from streams.runtime import Runtime
from streams.web.health import readiness


def register(app: faust.App, runtime: Runtime) -> None:
    @app.page("/health/live")
    async def live(web: View, request: Request) -> Response:
        return web.json({"status": "alive"})

    @app.page("/health")
    async def health(web: View, request: Request) -> Response:
        ready, checks = await readiness(app, runtime)
        body = {"status": "ready" if ready else "not ready", **checks}
        return web.json(body, status=200 if ready else 503)

    @app.page("/metrics")
    async def metrics(web: View, request: Request) -> Response:
        # aiohttp refuses a charset inside content_type; the exposition format is UTF-8 anyway.
        return web.bytes(
            generate_latest(runtime.metrics.registry), content_type="text/plain; version=0.0.4"
        )
