"""Every worker announces itself (id, status page URL) so each status page lists the others."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import timedelta

from db import workers as repo
from db.connector import connection
from streams.runtime import Runtime
from streams.timers.context import RunContext

# A worker not heard from for this long is no longer listed.
LIVE_WITHIN = timedelta(seconds=30)


def web_url(runtime: Runtime) -> str:
    s = runtime.settings
    if s.web_advertised_url:
        return s.web_advertised_url
    host = s.web_host if s.web_host not in ("0.0.0.0", "::", "") else socket.gethostname()
    return f"http://{host}:{s.web_port}"


@dataclass(frozen=True)
class HeartbeatResult:
    worker_id: str

    def summary(self) -> dict[str, str]:
        return {"worker": self.worker_id}


class Heartbeat:
    def __init__(self, runtime: Runtime, worker_id: str) -> None:
        self.runtime = runtime
        self.worker_id = worker_id

    async def run_once(self, ctx: RunContext) -> HeartbeatResult:
        as_of = ctx.as_of
        pool = await self.runtime.pool()
        async with connection(pool) as conn:
            await repo.heartbeat(
                conn, self.worker_id, self.runtime.settings.app_id, web_url(self.runtime), as_of
            )
        return HeartbeatResult(self.worker_id)


async def live_workers(runtime: Runtime, worker_id: str) -> dict[str, object]:
    """The /status "cluster" section: this app's workers seen lately, with their pages."""
    now = runtime.clock.now()
    pool = await runtime.pool()
    async with connection(pool) as conn:
        found = await repo.list_live(conn, runtime.settings.app_id, now - LIVE_WITHIN)
    return {
        "workers": [
            {
                "id": w.worker_id,
                "url": w.web_url,
                "seen": round((now - w.last_seen_at).total_seconds(), 1),
                "self": w.worker_id == worker_id,
            }
            for w in found
        ]
    }
