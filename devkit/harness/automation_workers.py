"""Automation with worker processes: the contract topics made, and a wait on a ledger value
that fails at once when a worker died."""

from __future__ import annotations

from typing import Any

import asyncpg

from devkit.wait import eventually
from devkit.workers import WorkerProcess
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings


async def wait_until(
    pool: asyncpg.Pool,
    sql: str,
    expect: Any,
    timeout: float,
    workers: list[WorkerProcess],
    *args: Any,
) -> None:

    async def probe() -> Any:
        value = await pool.fetchval(sql, *args)
        if value != expect:
            for w in workers:
                assert w.proc is not None and w.proc.poll() is None, f"{w.name} died:\n{w.tail()}"
        return value

    await eventually(
        probe,
        timeout=timeout,
        what=f"{sql} = {expect!r}",
        until=lambda v: v == expect,
        interval=0.1,
    )


async def topics(kafka_bootstrap: str, prefix: str) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=prefix)
    await ensure_topics(settings, contract_topic_names(settings))
