"""The calendar card's lateness line: per minute of DueAt over the last hour, the p95 of
SentAt - DueAt (seed 000's SLO: within 2 minutes), read from the ledger, not from a
process's memory, so every worker's overview shows the cluster's figure.

One bounded statement (``event_reminders_lateness_minutes``), kept ~30 s in the process
like the outbox activity beside it: the cache only saves work; nothing decides on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from db import event_reminders as repo
from db.connector import DatabaseUnavailable, InputRejected, connection
from streams.console.activity import CACHE_SECONDS, ROW_LIMIT, WINDOW_MINUTES
from streams.runtime import Runtime


def merge(
    activity: dict[str, Any], minutes: Sequence[repo.LatenessMinute] | None, limit: int = ROW_LIMIT
) -> dict[str, Any]:
    """``activity`` (streams/console/activity.py ``summary``) with each minute's
    ``lateness_p95_seconds`` (None: nothing came due then, or it is not sent yet) and the
    window's ``worst_lateness_p95_seconds``; unchanged when the ledger could not be read."""
    if minutes is None or "minutes" not in activity:
        return activity
    by_minute = {m.minute.isoformat(): m for m in minutes}
    out = []
    for m in activity["minutes"]:
        found = by_minute.get(m["minute"])
        p95 = found.lateness_p95_seconds if found is not None else None
        out.append({**m, "lateness_p95_seconds": round(p95, 3) if p95 is not None else None})
    values = [m["lateness_p95_seconds"] for m in out if m["lateness_p95_seconds"] is not None]
    return {
        **activity,
        "minutes": out,
        "worst_lateness_p95_seconds": max(values) if values else None,
        "lateness_capped": sum(m.sent for m in minutes) >= limit,
    }


@dataclass
class LatenessReader:
    """The last hour's lateness per minute, read at most every ``ttl`` seconds."""

    runtime: Runtime
    ttl: float = CACHE_SECONDS
    limit: int = ROW_LIMIT
    monotonic: Callable[[], float] = time.monotonic
    _cached: tuple[float, list[repo.LatenessMinute]] | None = field(default=None, init=False)

    async def minutes(self) -> list[repo.LatenessMinute] | None:
        now = self.monotonic()
        if self._cached is None or now - self._cached[0] >= self.ttl:
            until = self.runtime.clock.now()
            since = until.replace(second=0, microsecond=0) - timedelta(minutes=WINDOW_MINUTES - 1)
            try:
                pool = await self.runtime.pool()
                async with connection(pool) as conn:
                    read = await repo.lateness_minutes(conn, since, until, self.limit)
            except (DatabaseUnavailable, InputRejected):
                return None
            self._cached = (now, read)
        return self._cached[1]
