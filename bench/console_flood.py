"""Reads cannot hurt the writes: ``python -m bench.console_flood [ROWS] [--clients N]``
(not part of ``make bench``: the fill alone takes a minute).

A throwaway database with ROWS Completed automation.scheduler rows (default 1,000,000), one
worker process (``python -m streams worker``, its own defaults: read pages open, as a worker
without WEB_READ_TOKEN serves them). Two phases, each producing EVENTS calendar events whose
reminders fall due 15 s later, and measuring: ingest (first event produced -> every event
stored), dispatch lateness (DueAt -> SentAt, p50/p95/max) and /health (polled every 0.25 s:
answers that were not 200, slowest answer). The first phase is quiet; in the second, N
clients (default 300) loop on the worst reads the pages offer until the phase ends: the
scheduler listing with a business unit and a key prefix that match nothing (what read every
row of the state before), the counts of every listing, /status, /explain of an unknown id and
the dead-letter page (``--read-token``: the worker has a WEB_READ_TOKEN, the flood none: every
read answers 401). A control phase floods a decoy server (503 to everything) on the same
machine: what the flood's own CPU costs the worker. Prints the phases, the flood's answers by status, and whether the
flooded phase stayed within the bound (ingest and p95 lateness at most BOUND x the control
phase's plus 2 s, /health 200 throughout).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import aiohttp
import asyncpg

from bench.common import (
    KAFKA_BOOTSTRAP,
    calendar_event,
    database,
    drop_topics,
    produce,
    scratch_dir,
)
from devkit.workers import WorkerProcess, free_port, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

EVENTS = 2_000
LEAD_SECONDS = 15.0
BOUND = 2.0
PHASE_TIMEOUT = 180.0
MAX_FLOOD_SECONDS = 600.0

FILL = """
INSERT INTO automation.scheduler (automation_type_id, trigger_type_id, scheduler_key,
                                  scheduled_on, status_id, input_hash, setting_guid)
SELECT 'Reminder', 'DateBased', 'reminder:' || g, $1::timestamptz + make_interval(secs => g),
       'Completed', repeat('0', 64),
       ('00000000-0000-4000-8000-' || lpad(to_hex(g % 1000), 12, '0'))::uuid
FROM generate_series(1, $2::int) AS g
"""


@dataclass
class Phase:
    label: str
    ingest_seconds: float = float("nan")
    lateness: list[float] = field(default_factory=list)
    health: list[tuple[int, float]] = field(default_factory=list)
    flood: collections.Counter[int] = field(default_factory=collections.Counter)
    flood_seconds: float = 0.0

    def late(self, q: float) -> float:
        if not self.lateness:
            return float("nan")
        ordered = sorted(self.lateness)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def rate(self) -> str:
        total = sum(self.flood.values())
        per_second = total / self.flood_seconds if self.flood_seconds else float("nan")
        return f"{total} requests in {self.flood_seconds:.0f} s, {per_second:.0f}/s"

    def line(self) -> str:
        bad = sum(1 for status, _ in self.health if status != 200)
        slowest = max((t for _, t in self.health), default=float("nan"))
        median = statistics.median(self.lateness) if self.lateness else float("nan")
        return (
            f"{self.label:<8} ingest {self.ingest_seconds:6.2f} s | lateness p50 {median:5.2f} "
            f"p95 {self.late(0.95):5.2f} max {self.late(1.0):5.2f} s | /health "
            f"{len(self.health) - bad}/{len(self.health)} 200, slowest {slowest * 1000:.0f} ms"
        )


def worst_reads(topic: str) -> list[str]:
    scheduler = "/console/rows/automation/scheduler?state=Completed&format=json"
    return [
        f"{scheduler}&bu={uuid.uuid4()}",
        f"{scheduler}&key_prefix=nothing-{uuid.uuid4().hex}",
        f"{scheduler}&bu={uuid.uuid4()}&key_prefix=reminder:",
        "/console/rows?format=json",
        "/status?format=json",
        f"/explain/{uuid.uuid4()}",
        f"/console/dlq?topic={topic}&format=json",
    ]


async def flood(
    base: str, topic: str, clients: int, stop: asyncio.Event
) -> tuple[collections.Counter[int], float]:
    """The flood itself (in a process of its own: ``--flood``), until ``stop``."""
    counts: collections.Counter[int] = collections.Counter()
    started = time.monotonic()
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(base, connector=connector, timeout=timeout) as session:

        async def client(i: int) -> None:
            n = i
            while not stop.is_set():
                paths = worst_reads(topic)
                if os.environ.get("FLOOD_ONLY"):  # one kind of read alone: which one costs
                    paths = [paths[int(os.environ["FLOOD_ONLY"])]]
                path = paths[n % len(paths)]
                n += 1
                try:
                    async with session.get(path) as r:
                        await r.read()
                        counts[r.status] += 1
                except (aiohttp.ClientError, TimeoutError):
                    counts[0] += 1

        await asyncio.gather(*(client(i) for i in range(clients)))
    return counts, time.monotonic() - started


async def flood_process(base: str, topic: str, clients: int) -> None:
    """``--flood``: flood until stdin closes (or MAX_FLOOD_SECONDS), then print the counts."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.call_later(MAX_FLOOD_SECONDS, stop.set)

    async def watch_stdin() -> None:
        await asyncio.to_thread(sys.stdin.read)
        stop.set()

    watcher = asyncio.ensure_future(watch_stdin())
    counts, seconds = await flood(base, topic, clients, stop)
    watcher.cancel()
    print(json.dumps({"counts": {str(k): v for k, v in counts.items()}, "seconds": seconds}))


async def decoy(port: int) -> None:
    """``--decoy``: a bare aiohttp server answering 503 to everything (the control: what the
    same flood costs this machine when it is not the worker that answers)."""
    from aiohttp import web

    async def busy(request: web.Request) -> web.Response:
        return web.json_response({"error": "busy"}, status=503, headers={"Retry-After": "1"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", busy)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.to_thread(sys.stdin.read)  # until the bench closes it
    await runner.cleanup()


async def start_flood(base: str, topic: str, clients: int) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.console_flood",
        "--flood",
        base,
        topic,
        "--clients",
        str(clients),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )


async def stop_flood(proc: asyncio.subprocess.Process, phase: Phase) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    result = json.loads(out.decode().strip().splitlines()[-1])
    phase.flood.update({int(k): int(v) for k, v in result["counts"].items()})
    phase.flood_seconds = float(result["seconds"])


async def probe_health(base: str, stop: asyncio.Event, phase: Phase) -> None:
    async with aiohttp.ClientSession(base, timeout=aiohttp.ClientTimeout(total=10)) as session:
        while not stop.is_set():
            started = time.monotonic()
            try:
                async with session.get("/health") as r:
                    await r.read()
                    status = r.status
            except (aiohttp.ClientError, TimeoutError):
                status = 0
            phase.health.append((status, time.monotonic() - started))
            await asyncio.sleep(0.25)


async def run_phase(
    label: str, url: str, base: str, topic: str, clients: int, target: str | None
) -> Phase:
    """``target``: the base URL to flood (the worker's, a decoy's), None: quiet."""
    phase = Phase(label)
    stop = asyncio.Event()
    conn = await asyncpg.connect(url)
    tasks = [asyncio.ensure_future(probe_health(base, stop, phase))]
    flooding = await start_flood(target, topic, clients) if target else None
    try:
        if flooding is not None:
            await asyncio.sleep(3)  # the flood at full strength before the first event
        before = int(await conn.fetchval("SELECT count(*) FROM calendar.events"))
        now = datetime.now(UTC)
        due = now + timedelta(seconds=LEAD_SECONDS)
        bodies = [calendar_event(due + timedelta(minutes=1), [1], now) for _ in range(EVENTS)]
        started = time.monotonic()
        await produce(topic, bodies, f"  {label}: producing")
        deadline = started + PHASE_TIMEOUT
        ingested: float | None = None
        while time.monotonic() < deadline:
            stored = int(await conn.fetchval("SELECT count(*) FROM calendar.events")) - before
            if stored >= EVENTS and ingested is None:
                ingested = phase.ingest_seconds = time.monotonic() - started
            pending = int(
                await conn.fetchval(
                    "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Pending'"
                )
            )
            if stored >= EVENTS and pending == 0:
                break
            await asyncio.sleep(0.2)
        rows = await conn.fetch(
            "SELECT extract(epoch FROM sent_at - due_at)::float8 AS late "
            "FROM calendar.event_reminders WHERE due_at >= $1 AND status = 'Sent'",
            due - timedelta(seconds=1),
        )
        phase.lateness = [float(r["late"]) for r in rows]
    finally:
        stop.set()
        if flooding is not None:
            await stop_flood(flooding, phase)
        await asyncio.gather(*tasks, return_exceptions=True)
        await conn.close()
    return phase


async def run(rows: int, clients: int, gated: bool) -> int:
    """``gated``: the worker has a WEB_READ_TOKEN the flood does not know (every read 401)."""
    reads = "behind WEB_READ_TOKEN (the flood has none)" if gated else "open"
    print(
        f"== console flood: {rows:,} Completed scheduler rows, {clients} clients, reads {reads} =="
    )
    prefix = f"bench{uuid.uuid4().hex[:8]}."
    settings = Settings(kafka_bootstrap=KAFKA_BOOTSTRAP, topic_prefix=prefix)
    try:
        await ensure_topics(settings, contract_topic_names(settings))
        topic = settings.topic("pin.calendar.events.v1")
        async with database(prefix="flood") as url:
            conn = await asyncpg.connect(url)
            started = time.monotonic()
            await conn.execute(FILL, datetime(2026, 1, 1, tzinfo=UTC), rows)
            await conn.execute("VACUUM (ANALYZE) automation.scheduler")
            await conn.close()
            print(f"  filled in {time.monotonic() - started:.0f} s")
            with scratch_dir("bench-flood-") as tmp:
                extra = {"WEB_READ_TOKEN": uuid.uuid4().hex * 2} if gated else {}
                env = worker_env(url, KAFKA_BOOTSTRAP, prefix, **extra)
                worker = WorkerProcess(env, tmp, "flood")
                worker.start()
                try:
                    await worker.wait_ready(timeout=180)
                    base = f"http://127.0.0.1:{worker.port}"
                    quiet = await run_phase("quiet", url, base, topic, clients, None)
                    print("  " + quiet.line())
                    port = free_port()
                    dummy = await asyncio.create_subprocess_exec(
                        sys.executable, "-m", "bench.console_flood", "--decoy", str(port),
                        stdin=asyncio.subprocess.PIPE,
                    )  # fmt: skip
                    try:
                        await asyncio.sleep(2)
                        target = f"http://127.0.0.1:{port}"
                        control = await run_phase("control", url, base, topic, clients, target)
                    finally:
                        assert dummy.stdin is not None
                        dummy.stdin.close()
                        await dummy.wait()
                    print("  " + control.line() + f" (flood of a decoy: {control.rate()})")
                    loud = await run_phase("flooded", url, base, topic, clients, base)
                    print("  " + loud.line())
                finally:
                    worker.stop()
    finally:
        await drop_topics(prefix)
    statuses = ", ".join(f"{k or 'error'}: {v}" for k, v in sorted(loud.flood.items()))
    print(f"  flood of the worker: {loud.rate()}: {statuses}")
    healthy = all(status == 200 for status, _ in loud.health)
    ingest_ok = loud.ingest_seconds <= BOUND * control.ingest_seconds + 2
    late_ok = loud.late(0.95) <= BOUND * max(control.late(0.95), 0) + 2
    print(
        f"  bound (flooded <= {BOUND} x control + 2 s, /health 200 throughout): ingest "
        f"{'ok' if ingest_ok else 'MISSED'}, lateness p95 {'ok' if late_ok else 'MISSED'}, "
        f"/health {'ok' if healthy else 'MISSED'}"
    )
    return 0 if ingest_ok and late_ok and healthy else 1


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.console_flood", description=__doc__)
    p.add_argument("rows", nargs="?", type=int, default=1_000_000)
    p.add_argument("--clients", type=int, default=300)
    p.add_argument("--read-token", action="store_true", help="the worker gates its reads")
    p.add_argument("--flood", nargs=2, metavar=("BASE", "TOPIC"), help=argparse.SUPPRESS)
    p.add_argument("--decoy", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.decoy:
        asyncio.run(decoy(args.decoy))
        return 0
    if args.flood:
        asyncio.run(flood_process(*args.flood, args.clients))
        return 0
    return asyncio.run(run(args.rows, args.clients, args.read_token))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
