"""Liveness and readiness: is the worker up, and can it do its job (Kafka, PostgreSQL, recovery)."""

from __future__ import annotations

import asyncio
from typing import Any

import faust

from streams.runtime import Runtime


async def readiness(app: faust.App, runtime: Runtime) -> tuple[bool, dict[str, Any]]:
    checks: dict[str, Any] = {}
    try:
        pool = await asyncio.wait_for(runtime.pool(), timeout=2)
        async with pool.acquire(timeout=2) as conn:
            await conn.fetchval("SELECT 1", timeout=2)
        checks["postgres"] = "ok"
    except Exception as exc:  # readiness reports, it never raises
        checks["postgres"] = f"error: {type(exc).__name__}"
    try:
        assigned = app.consumer.assignment()
        checks["kafka"] = "ok" if app.producer.started and app.consumer.started else "not started"
        checks["assigned_partitions"] = len(assigned)
    except Exception as exc:
        checks["kafka"] = f"error: {type(exc).__name__}"
    recovered = bool(getattr(app.tables, "recovery").completed.is_set())  # noqa: B009
    checks["recovery"] = "done" if recovered else "in progress"
    crashed = [name for name, agent in app.agents.items() if agent.crash_reason is not None]
    checks["crashed_agents"] = crashed
    ready = checks["postgres"] == "ok" and checks["kafka"] == "ok" and recovered and not crashed
    return ready, checks
