"""Liveness and readiness: is the worker up, and can it do its job (Kafka, PostgreSQL, recovery,
agents alive, every assigned input partition moving, its own local store working)."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import faust

from db.connector import connection, ping
from streams.faust_compat import committed_offsets
from streams.input.consumer import ContractConsumer
from streams.input.progress import Stall
from streams.runtime import Runtime
from streams.tables.cache import KeyCache
from streams.timer_process.supervisor import TimerProcess


def agent_topics(app: faust.App, agent_name: str) -> set[str]:
    agent = app.agents[agent_name]
    return set(getattr(agent.channel, "topics", ()))


def partition_stalls(
    app: faust.App, runtime: Runtime, consumers: Mapping[str, ContractConsumer[Any]]
) -> dict[str, list[Stall]]:
    """Per agent, the assigned partitions that have lag and have not moved for too long."""
    out: dict[str, list[Stall]] = {}
    if not app.consumer.started:
        return out
    assigned = app.consumer.assignment()
    committed = committed_offsets(app.consumer)
    limit = runtime.settings.stream_stall_seconds
    for name, consumer in consumers.items():
        topics = agent_topics(app, name)
        mine = [tp for tp in assigned if tp.topic in topics]
        consumer.progress.forget(mine)
        stalls = []
        for tp in mine:
            stall = consumer.progress.check(
                tp,
                highwater=app.consumer.highwater(tp),
                committed=committed.get(tp),
                limit_seconds=limit,
            )
            if stall is not None:
                stalls.append(stall)
        runtime.metrics.agents.stalled.labels(name).set(len(stalls))
        out[name] = stalls
    return out


def timer_process_check(timer_process: TimerProcess) -> str:
    """``ok``, ``down``, or ``stalled:`` with what is behind (the child silent, or which of its
    loops is late) and by how long."""
    if timer_process.stalled:
        what, late = timer_process.late
        if what == "silent":
            return f"stalled: silent for {late:.0f}s"
        return f"stalled: {what} late by {late:.0f}s"
    return "ok" if timer_process.ready else "down"


class PostgresProbe:
    """Can the worker's own pool get a connection and a statement answered within 2 s?

    On the worker's pool, not the read pages' (a flood of reads must not make the worker look
    down; a worker whose own pool is exhausted is not ready). At most one ping is in flight,
    whatever the number of probes and scrapers asking at once, and its answer is reused for
    ``FRESH_SECONDS``: /health is open, so it must not be a way to take the worker's
    connections either."""

    FRESH_SECONDS = 1.0

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._answer: tuple[float, str] | None = None
        self._pinging: asyncio.Future[str] | None = None

    async def check(self) -> str:
        if self._answer is not None and time.monotonic() - self._answer[0] < self.FRESH_SECONDS:
            return self._answer[1]
        if self._pinging is None or self._pinging.done():
            self._pinging = asyncio.ensure_future(self._ping())
        return await asyncio.shield(self._pinging)

    async def _ping(self) -> str:
        try:
            pool = await asyncio.wait_for(self.runtime.worker_pool(), timeout=2)
            async with connection(pool, timeout=2) as conn:
                await ping(conn, timeout=2)
            answer = "ok"
        except Exception as exc:  # readiness reports, it never raises
            answer = f"error: {type(exc).__name__}"
        self._answer = (time.monotonic(), answer)
        return answer


_PROBES: weakref.WeakKeyDictionary[Runtime, PostgresProbe] = weakref.WeakKeyDictionary()


def postgres_probe(runtime: Runtime) -> PostgresProbe:
    probe = _PROBES.get(runtime)
    if probe is None:
        probe = _PROBES[runtime] = PostgresProbe(runtime)
    return probe


async def readiness(
    app: faust.App,
    runtime: Runtime,
    consumers: Mapping[str, ContractConsumer[Any]] = {},
    timer_process: TimerProcess | None = None,
    caches: Sequence[KeyCache] = (),
) -> tuple[bool, dict[str, Any]]:
    checks: dict[str, Any] = {"postgres": await postgres_probe(runtime).check()}
    checks["clock"] = runtime.clock_problem() or "ok"
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
    stalls = partition_stalls(app, runtime, consumers)
    checks["stalled_partitions"] = {
        name: [
            f"{s.partition.topic}:{s.partition.partition} lag={s.lag} for={s.seconds}s" for s in ss
        ]
        for name, ss in stalls.items()
        if ss
    }
    # Cache tables whose local store (RocksDB, the worker's own disk) fails: a write holds
    # its batch until the store takes it, a read falls back to PostgreSQL.
    storage = {cache.name: failing for cache in caches if (failing := cache.failing())}
    checks["local_storage"] = storage
    if timer_process is not None:
        checks["timer_process"] = timer_process_check(timer_process)
    ready = (
        checks.get("timer_process", "ok") == "ok"
        and checks["postgres"] == "ok"
        and checks["clock"] == "ok"
        and checks["kafka"] == "ok"
        and recovered
        and not crashed
        and not checks["stalled_partitions"]
        and not storage
    )
    return ready, checks
