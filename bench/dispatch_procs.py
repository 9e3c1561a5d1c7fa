"""The dispatcher in N OS processes at once over the same due rows (SKIP LOCKED shares them).

``run_processes`` starts N children (``python -m bench.dispatch_procs URL AS_OF BATCH``);
each builds the real dispatcher, says ``ready``, waits for ``go`` on stdin, then runs
``run_once`` until no due row is left and prints what it sent, when it started and ended
(CLOCK_MONOTONIC, shared by the processes of one machine) and the CPU it used meanwhile.
Throughput is all rows sent over the span from the first start to the last end; CPU per
row is the children's CPU and PostgreSQL's over the same window (bench/cpu.py).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import asyncpg

from bench.cpu import CpuMeter, PerEvent, per_event

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 900.0  # a child gives up after this long (the other one died holding rows)


async def run_processes(
    url: str, as_of: datetime, batch: int, count: int
) -> tuple[int, float, PerEvent]:
    """(rows sent by all, seconds from the first start to the last end, CPU per row)."""
    conn = await asyncpg.connect(url)
    meter = CpuMeter(conn)
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.dispatch_procs",
            url,
            as_of.isoformat(),
            str(batch),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(count)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            line = await asyncio.wait_for(p.stdout.readline(), timeout=120)
            if line.strip() != b"ready":
                raise RuntimeError(f"dispatch child said {line!r} instead of ready")
        # The children's own CPU comes from their reports; here only PostgreSQL's.
        before = await meter.sample([])
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            await p.stdin.drain()
        results = []
        for p in procs:
            assert p.stdout is not None
            line = await asyncio.wait_for(p.stdout.readline(), timeout=DEADLINE + 60)
            results.append(json.loads(line))
            await p.wait()
        after = await meter.sample([], sum(float(r["cpu"]) for r in results))
    finally:
        await conn.close()
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
    sent = sum(int(r["sent"]) for r in results)
    span = max(float(r["end"]) for r in results) - min(float(r["start"]) for r in results)
    return sent, span, per_event(before, after, sent)


async def child(url: str, as_of: datetime, batch: int) -> None:
    from streams.clock import SystemClock
    from streams.runtime import Runtime
    from streams.settings import Settings
    from streams.slices.calendar.dispatch import CalendarReminderDispatcher, DispatchConfig
    from streams.timers.context import RunContext

    runtime = Runtime(
        Settings(database_url=url, db_pool_min_size=1, db_pool_max_size=2), clock=SystemClock()
    )
    dispatcher = CalendarReminderDispatcher(runtime, DispatchConfig(batch_size=batch))
    try:
        await runtime.pool()
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        sent, start, cpu = 0, time.monotonic(), time.process_time()
        while True:
            result = await dispatcher.run_once(
                RunContext.at(as_of, clock=dispatcher.clock, budget=timedelta(hours=1))
            )
            sent += result.sent_count
            # backlog counts due rows the other process still holds: go on until none is left.
            if result.backlog == 0 or time.monotonic() - start > DEADLINE:
                break
        end, cpu = time.monotonic(), time.process_time() - cpu
        print(json.dumps({"sent": sent, "start": start, "end": end, "cpu": cpu}), flush=True)
    finally:
        await runtime.close()


if __name__ == "__main__":
    asyncio.run(child(sys.argv[1], datetime.fromisoformat(sys.argv[2]), int(sys.argv[3])))
