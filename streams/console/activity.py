"""A slice's last hour, per minute, from its outbox records: written, published, the backlog left at each minute's end and the p95 wait (for the overview's charts).

The figure comes from one bounded statement (``outbox_minutes``) and is kept ~30 s in the
process: /status refreshes every 5 s on every worker, and a chart a few seconds old says the
same. The cache only saves work; nothing decides on it.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from db import outbox as repo
from db.connector import DatabaseUnavailable, InputRejected, connection
from streams.runtime import Runtime

WINDOW_MINUTES = 60
CACHE_SECONDS = 30.0
# Rows read on each side of the statement (published in the hour, still waiting), all the
# slices' topics together: an hour beyond this (about 2.4M records a day) shows its newest
# part, and the sections say ``capped``. 100k rows cost ~0.1-0.3 s on this machine's
# PostgreSQL (docs/console.md), once per CACHE_SECONDS per worker.
ROW_LIMIT = 100_000


def buckets(
    stats: Sequence[repo.MinuteStats], until: datetime, minutes: int = WINDOW_MINUTES
) -> list[dict[str, Any]]:
    """One dict per minute of the ``minutes`` before ``until`` (oldest first), every minute
    present: written, published, backlog (written so far - published so far, never below 0)
    and the p95 wait of that minute's published records (None when none)."""
    end = until.replace(second=0, microsecond=0)
    start = end - timedelta(minutes=minutes - 1)
    by_minute: dict[datetime, list[repo.MinuteStats]] = {}
    for s in stats:
        by_minute.setdefault(max(s.minute, start), []).append(s)
    out: list[dict[str, Any]] = []
    backlog = 0
    for i in range(minutes):
        minute = start + timedelta(minutes=i)
        rows = by_minute.get(minute, [])
        written = sum(r.written for r in rows)
        published = sum(r.published for r in rows)
        backlog = max(0, backlog + written - published)
        waits = [r.wait_p95_seconds for r in rows if r.wait_p95_seconds is not None]
        out.append(
            {
                "minute": minute.isoformat(),
                "written": written,
                "published": published,
                "backlog": backlog,
                "wait_p95_seconds": round(max(waits), 3) if waits else None,
            }
        )
    return out


def summary(per_minute: list[dict[str, Any]], capped: bool) -> dict[str, Any]:
    """The section's ``activity``: totals over the window, the backlog now, the worst
    minute's p95 wait, and the minutes themselves (the chart's points)."""
    waits = [m["wait_p95_seconds"] for m in per_minute if m["wait_p95_seconds"] is not None]
    return {
        "window_minutes": len(per_minute),
        "published": sum(m["published"] for m in per_minute),
        "backlog": per_minute[-1]["backlog"] if per_minute else 0,
        "worst_wait_p95_seconds": max(waits) if waits else None,
        "capped": capped,
        "minutes": per_minute,
    }


@dataclass
class ActivityReader:
    """The last hour of some topics' outbox records, read for all of them in one statement
    at most every ``ttl`` seconds (one reader per runtime: the slices share it)."""

    runtime: Runtime
    topics: set[str] = field(default_factory=set)
    ttl: float = CACHE_SECONDS
    limit: int = ROW_LIMIT
    monotonic: Callable[[], float] = time.monotonic
    _cached: tuple[float, dict[str, dict[str, Any]]] | None = field(default=None, init=False)

    async def of(self, topic: str) -> dict[str, Any]:
        """One topic's ``activity`` (read with the others when the cached figure is old)."""
        now = self.monotonic()
        if self._cached is None or now - self._cached[0] >= self.ttl:
            try:
                self._cached = (now, await self._read())
            except (DatabaseUnavailable, InputRejected) as exc:
                return {"error": f"database unavailable ({type(exc).__name__})"}
        return self._cached[1].get(topic) or summary(buckets([], self.runtime.clock.now()), False)

    async def _read(self) -> dict[str, dict[str, Any]]:
        until = self.runtime.clock.now()
        since = until.replace(second=0, microsecond=0) - timedelta(minutes=WINDOW_MINUTES - 1)
        topics = sorted(self.topics)
        pool = await self.runtime.pool()
        async with connection(pool) as conn:
            stats = await repo.minutes(conn, since, until, topics, self.limit)
        # The newest ``limit`` published rows of all the topics were read: past that, the
        # oldest minutes are short, and every topic's section says so.
        capped = sum(s.published for s in stats) >= self.limit
        return {
            topic: summary(buckets([s for s in stats if s.topic == topic], until), capped)
            for topic in topics
        }


_READERS: weakref.WeakKeyDictionary[Runtime, ActivityReader] = weakref.WeakKeyDictionary()


def activity_of(runtime: Runtime, contract_name: str) -> Callable[[], Awaitable[dict[str, Any]]]:
    """The last hour of one output contract's topic (``TOPIC_PREFIX`` applied), through the
    runtime's one shared reader."""
    reader = _READERS.get(runtime)
    if reader is None:
        reader = _READERS[runtime] = ActivityReader(runtime)
    topic = f"{runtime.settings.topic_prefix}{contract_name}"
    reader.topics.add(topic)
    return lambda: reader.of(topic)
