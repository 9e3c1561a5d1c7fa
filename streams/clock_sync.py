"""Keeps a worker's ``DatabaseClock`` on PostgreSQL's time: a reading before the first use,
then one every ``CLOCK_SYNC_INTERVAL_SECONDS``; the worker's own clock's distance from it is
logged, exported (``reminders_worker_clock_skew_seconds``) and, past
``CLOCK_SKEW_MAX_SECONDS``, makes the worker not ready (streams/web/health.py)."""

from __future__ import annotations

import asyncio
import logging

from db import server
from db.connector import Pool, connection
from streams import logs
from streams.clock import DatabaseClock
from streams.metrics import Metrics

log = logging.getLogger("streams.clock")

READ_TIMEOUT = 5.0


async def read(pool: Pool, clock: DatabaseClock, metrics: Metrics | None = None) -> bool:
    """Take one reading of the database's clock into ``clock`` (False: ignored, its round
    trip too long). Raises what the database raises."""
    async with connection(pool, timeout=READ_TIMEOUT) as conn:
        sent = clock.monotonic()
        database_now = await server.clock(conn, timeout=READ_TIMEOUT)
        received = clock.monotonic()
        local_now = clock.local_now()
    taken = clock.observe(database_now, sent, received, local_now)
    if metrics is not None and clock.skew_seconds is not None:
        metrics.db.clock_skew.set(clock.skew_seconds)
    return taken


def skew_problem(clock: DatabaseClock, bound: float) -> str | None:
    """Why this worker's own clock is too far from the database's, or None."""
    skew = clock.skew_seconds
    if skew is None or abs(skew) <= bound:
        return None
    direction = "ahead of" if skew > 0 else "behind"
    return f"clock {abs(skew):.1f}s {direction} the database's (bound {bound:g}s)"


async def keep_synced(
    pool: Pool, clock: DatabaseClock, metrics: Metrics, *, interval: float, bound: float
) -> None:
    """Read the database's clock every ``interval`` seconds until cancelled (the first reading
    is the caller's). A failed reading leaves the clock running on its last one (monotonic
    time does not drift in seconds); a worker's clock crossing ``bound`` either way is logged
    once per crossing."""
    skewed = False
    while True:
        problem = skew_problem(clock, bound)
        if problem is not None and not skewed:
            logs.event(
                log, logging.WARNING, "clock_skew", skew_seconds=clock.skew_seconds, bound=bound
            )
        elif problem is None and skewed:
            logs.event(log, logging.INFO, "clock_skew_resolved", skew_seconds=clock.skew_seconds)
        skewed = problem is not None
        await asyncio.sleep(interval)
        try:
            await read(pool, clock, metrics)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the database's own errors show on /health; keep the last reading
            logs.event(log, logging.DEBUG, "clock_read_failed", error=exc)
