"""/health while a starting worker waits for PostgreSQL and Kafka, before Faust serves the
port: not ready, saying what it waits for and how its timer process (which starts once
PostgreSQL answers) is doing."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from streams import logs
from streams.timer_process.supervisor import TimerProcess
from streams.web.health import timer_process_check

log = logging.getLogger("streams.startup_wait")


def startup_checks(status: dict[str, str], timer_process: TimerProcess | None) -> dict[str, str]:
    checks = {"status": "starting", **status}
    if timer_process is not None:
        checks["timer_process"] = timer_process_check(timer_process)
    return checks


@contextlib.asynccontextmanager
async def startup_health(
    host: str, port: int, status: dict[str, str], timer_process: TimerProcess | None
) -> AsyncIterator[None]:
    """Serve ``/health`` (503, the checks) and ``/health/live`` (200) on the worker's port
    while the block runs; a port that cannot be bound only costs the answers."""

    async def health(request: web.Request) -> web.Response:
        return web.json_response(startup_checks(status, timer_process), status=503)

    async def live(request: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/health/live", live)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port, reuse_address=True).start()
        except OSError as exc:
            logs.event(log, logging.WARNING, "startup_health_unavailable", port=port, error=exc)
        yield
    finally:
        await runner.cleanup()
