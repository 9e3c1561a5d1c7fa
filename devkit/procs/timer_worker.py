"""A worker process running only the timer registry, recording each run into PostgreSQL (e2e)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import timedelta

import asyncpg

from db.connector import create_pool
from db.timers import TimerRepository
from streams import logs
from streams.timers import Mode, Schedule, TimerRegistry
from streams.timers.context import RunContext

# Created by the test before it starts the workers.
RUNS_TABLE = "e2e_timer_runs"


class SlowRun:
    """Records its start, works ``seconds``, records its end: a kill in between leaves a
    started slot without an end, which another worker must take over and finish."""

    def __init__(self, pool: asyncpg.Pool, schedule: str, worker_id: str, seconds: float) -> None:
        self.pool = pool
        self.schedule = schedule
        self.worker_id = worker_id
        self.seconds = seconds

    async def run_once(self, ctx: RunContext) -> None:
        insert = f"INSERT INTO {RUNS_TABLE} (schedule, slot, worker_id) VALUES ($1, $2, $3)"
        await self.pool.execute(insert, f"{self.schedule}:start", ctx.as_of, self.worker_id)
        await asyncio.sleep(self.seconds)
        await self.pool.execute(insert, self.schedule, ctx.as_of, self.worker_id)


class RecordRun:
    """Inserts (schedule, as_of, worker) for every run, so the test can count runs per slot."""

    def __init__(self, pool: asyncpg.Pool, schedule: str, worker_id: str) -> None:
        self.pool = pool
        self.schedule = schedule
        self.worker_id = worker_id

    async def run_once(self, ctx: RunContext) -> None:
        await self.pool.execute(
            f"INSERT INTO {RUNS_TABLE} (schedule, slot, worker_id) VALUES ($1, $2, $3)",
            self.schedule,
            ctx.as_of,
            self.worker_id,
        )


async def main() -> int:
    logs.configure(os.environ.get("LOG_LEVEL", "info"), os.environ.get("LOG_FORMAT", "text"))
    worker_id = os.environ["TIMER_E2E_WORKER_ID"]
    pool = await create_pool(os.environ["DATABASE_URL"], min_size=1, max_size=4)
    registry = TimerRegistry(
        store=TimerRepository(pool),
        worker_id=worker_id,
        lease_margin=timedelta(seconds=float(os.environ.get("TIMER_E2E_MARGIN_SECONDS", "1"))),
    )
    # Intervals come from TIMER_E2E_*_INTERVAL_SECONDS, as in a deployment.
    registry.register(
        Schedule(
            name="e2e-cluster",
            interval=timedelta(seconds=60),
            handler=RecordRun(pool, "e2e-cluster", worker_id),
            max_duration=timedelta(seconds=5),
            mode=Mode.CLUSTER_ONCE,
            settings_prefix="TIMER_E2E_CLUSTER_",
        )
    )
    registry.register(
        Schedule(
            name="e2e-every",
            interval=timedelta(seconds=60),
            handler=RecordRun(pool, "e2e-every", worker_id),
            max_duration=timedelta(seconds=5),
            mode=Mode.EVERY_INSTANCE,
            settings_prefix="TIMER_E2E_EVERY_",
        )
    )
    # Off unless TIMER_E2E_LEASE_ENABLED=true: a slow cluster-once job whose claimant the
    # test kills mid-run.
    registry.register(
        Schedule(
            name="e2e-lease",
            interval=timedelta(seconds=10),
            handler=SlowRun(
                pool,
                "e2e-lease",
                worker_id,
                float(os.environ.get("TIMER_E2E_SLOW_RUN_SECONDS", "3")),
            ),
            max_duration=timedelta(seconds=4),
            mode=Mode.CLUSTER_ONCE,
            settings_prefix="TIMER_E2E_LEASE_",
            enabled=False,
        )
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await registry.start()
    print("ready", flush=True)
    await stop.wait()
    await registry.stop(timeout=5)
    await pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
