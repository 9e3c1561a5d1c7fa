"""Ingest: calendar change events -> projection + reminder rows (SPEC §5: >= 5,000 events/s
per worker process; the performance issue: >= 0.8x a bare aiokafka + asyncpg pipeline writing
the same rows, bench/targets.py).

One topic (the service's own partition count, 4), ``events`` messages produced once, each
reader starting from the beginning with a fresh database:

1. reference: a bare aiokafka consumer doing nothing (informational ceiling);
2. reference: the bare pipeline (bench/pipeline.py) on its own database;
3. one worker process (``python -m streams worker``); its resident memory afterwards;
4. two worker processes in one consumer group (informational ratio to one);
5. after the one-worker run, the time a worker takes to become ready again with its data
   directory kept (a pod with its volume) and with an empty one (an emptyDir: its tables
   are rebuilt from their changelog topics, one record per event ingested).

Every run ends with the same rows: a checksum of both tables is compared with the bare
pipeline's. A worker's rate counts from the first poll at which every worker is ready and
rows have appeared to the poll that finds them all (start-up and rebalance excluded).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg

from bench.common import (
    KAFKA_BOOTSTRAP,
    calendar_event,
    database,
    drop_topics,
    produce,
    rss_mb,
    scratch_dir,
)
from bench.cpu import CpuMeter, PerEvent, Sample, per_event, scale_measures, tagged
from bench.pipeline import bare_pipeline, consume_only
from bench.progress import Progress
from bench.report import Measure, Target, measure
from bench.targets import INGEST, targets
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

QUICK = {"events": 3_000}
RSS_LIMIT_MB = 300

# What the rows are, without when they were written: equal sums = the same rows.
CHECKSUM = """
SELECT (SELECT count(*) FROM calendar.events) AS events,
       (SELECT count(*) FROM calendar.event_reminders) AS reminders,
       (SELECT md5(string_agg(concat_ws('|', event_id, tenant_id, owner_user_id, client_user_id,
            kind, start_at, time_zone, status, reminder_offsets_minutes, appointment_id, version,
            occurred_at, source_partition, source_offset), ',' ORDER BY event_id))
        FROM calendar.events) AS events_md5,
       (SELECT md5(string_agg(concat_ws('|', reminder_id, event_id, offset_minutes, due_at,
            status, sent_at, skip_reason, source_partition, source_offset, source_version),
            ',' ORDER BY reminder_id))
        FROM calendar.event_reminders) AS reminders_md5
"""


@dataclass(frozen=True)
class WorkerRun:
    rate: float
    rss: list[tuple[float, float]]
    """(VmRSS, VmHWM) in MB of each worker right after the last row arrived."""
    checksum: tuple[int, int, str, str]
    restart: tuple[float, float] | None = None
    """Seconds from start to ready of a restarted worker: data directory kept, empty."""
    cpu: PerEvent | None = None
    """CPU per event over the measured window (the workers and PostgreSQL)."""


POLL_MIN, POLL_MAX = 0.05, 0.5


def poll_interval(first: tuple[float, int] | None, last: tuple[float, int], events: int) -> float:
    """Seconds to the next count of the stored rows: a fifth of the time the rest should take
    at the rate seen so far, within [POLL_MIN, POLL_MAX]. The count reads the whole table on
    the machine under test (2 ms at 25,000 rows): polled every 50 ms it took about a tenth
    of a core from the worker, a load the bare pipeline, which counts in its own process,
    never carried. Near the end the polls come every 50 ms again, so the end is seen as
    closely as before."""
    if first is None or last[0] <= first[0] or last[1] <= first[1]:
        return POLL_MIN
    rate = (last[1] - first[1]) / (last[0] - first[0])
    return min(POLL_MAX, max(POLL_MIN, (events - last[1]) / rate / 5))


async def time_to_ready(worker: WorkerProcess) -> float:
    started = time.perf_counter()
    worker.start()
    try:
        await worker.wait_ready(timeout=300)
        return time.perf_counter() - started
    finally:
        worker.stop()


async def restart_times(env: dict[str, str], tmp: Path, name: str) -> tuple[float, float]:
    """The worker ``name`` (stopped) started again on its data directory, then a worker with
    an empty one: the second recovers every table from its changelog before it is ready."""
    kept = await time_to_ready(WorkerProcess(env, tmp, name))
    empty = await time_to_ready(WorkerProcess(env, tmp, f"{name}-empty-data"))
    return kept, empty


async def checksum(url: str) -> tuple[int, int, str, str]:
    conn = await asyncpg.connect(url)
    try:
        r = await conn.fetchrow(CHECKSUM)
        assert r is not None
        return int(r["events"]), int(r["reminders"]), str(r["events_md5"]), str(r["reminders_md5"])
    finally:
        await conn.close()


async def run_workers(
    prefix: str, events: int, count: int, *, restart: bool = False, attempt: int = 1
) -> WorkerRun:
    """``count`` worker processes (one consumer group, its own for each ``attempt``) ingest the
    topic into a fresh database; ``restart``: then time a worker's restart with its data
    directory kept and empty."""
    async with database() as url:
        with scratch_dir("bench-ingest-") as tmp:  # kept when a worker failed: its log
            app_id = f"{prefix}reminders-{count}w" + (f"-r{attempt}" if attempt > 1 else "")
            env = worker_env(url, KAFKA_BOOTSTRAP, prefix, APP_ID=app_id)
            procs = [WorkerProcess(env, tmp, f"ingest-worker-{i}") for i in range(count)]
            conn = await asyncpg.connect(url)
            meter = CpuMeter(conn)
            samples: dict[str, Sample] = {}
            ready: asyncio.Future[list[dict[str, object]]] | None = None
            try:
                for p in procs:
                    p.start()
                pids = [p.proc.pid for p in procs if p.proc is not None]
                ready = asyncio.ensure_future(
                    asyncio.gather(*(p.wait_ready(timeout=180) for p in procs))
                )
                first = start = None
                deadline = time.monotonic() + 900
                label = f"  {count} worker(s) ingesting"
                with Progress(label, total=events, unit="events") as progress:
                    while True:
                        n = await conn.fetchval(tagged("SELECT count(*) FROM calendar.events"))
                        now = time.perf_counter()
                        progress.update(n)
                        if ready.done():
                            ready.result()  # a worker that died before ready raises here
                        if n and first is None:
                            first = (now, n)
                            samples["first"] = await meter.sample(pids)
                        if n and start is None and ready.done():
                            start = (now, n)
                            samples["start"] = await meter.sample(pids)
                        if n >= events:
                            samples["end"] = await meter.sample(pids)
                            break
                        for p in procs:
                            assert p.proc is not None
                            if p.proc.poll() is not None:
                                raise RuntimeError(f"{p.name} exited:\n{p.tail()}")
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"{count} worker(s) stored {n} of {events} events")
                        await asyncio.sleep(poll_interval(first, (now, n), events))
                rss = [rss_mb(p.proc.pid) for p in procs if p.proc is not None]
                counted = start is not None and start[1] < events
                t0, n0 = start if start is not None and counted else (first or (now, n))
                rate = (events - n0) / (now - t0) if now > t0 else float("nan")
                begin = samples.get("start" if counted else "first")
                cpu = per_event(begin, samples["end"], events - n0) if begin else None
            finally:
                if ready is not None:
                    ready.cancel()
                    await asyncio.gather(ready, return_exceptions=True)
                await conn.close()
                for p in procs:
                    p.stop()
            restarted = await restart_times(env, tmp, procs[0].name) if restart else None
            return WorkerRun(rate, rss, await checksum(url), restarted, cpu)


async def run(events: int = 50_000) -> list[Measure]:
    print(f"\n== ingest: {events:,} calendar events (2 offsets each) -> rows ==")
    prefix = f"bench{uuid.uuid4().hex[:8]}."
    settings = Settings(kafka_bootstrap=KAFKA_BOOTSTRAP, topic_prefix=prefix)
    try:
        await ensure_topics(settings, contract_topic_names(settings))
        topic = settings.topic("pin.calendar.events.v1")
        start, now = datetime.now(UTC) + timedelta(days=2), datetime.now(UTC)
        bodies = [
            calendar_event(start + timedelta(seconds=i), [60, 15], now) for i in range(events)
        ]
        await produce(topic, bodies, f"  producing ({settings.topic_partitions} partitions)")
        del bodies

        consumed = await consume_only(topic, events)
        print(f"  bare aiokafka consume, no processing      {consumed:>9,.0f} msgs/s")
        # Best of two rounds each, alternating (as the automation bench does): one round of
        # a few seconds moved either side by up to 30% on this host, the same code giving
        # 0.73x to 0.97x in back-to-back runs.
        bares: list[float] = []
        ones: list[WorkerRun] = []
        for attempt in (1, 2):
            async with database() as url:
                group = f"{prefix}bare-pipeline-r{attempt}"
                bares.append(await bare_pipeline(url, topic, group, events))
                expected = await checksum(url)
            print(
                f"  bare pipeline (consume+json+asyncpg)     {bares[-1]:>9,.0f} events/s  "
                f"({expected[0]:,} events, {expected[1]:,} reminder rows)"
            )
            ones.append(await run_workers(prefix, events, 1, restart=attempt == 1, attempt=attempt))
            print(f"  one worker                               {ones[-1].rate:>9,.0f} events/s")
        bare = max(bares)
        one = max(ones, key=lambda r: r.rate)
        rss, hwm = ones[0].rss[0]
        print(
            f"  best of two: one worker {one.rate:,.0f} events/s, bare pipeline {bare:,.0f} "
            f"events/s, ratio {one.rate / bare:.2f}   (target >= 5,000/s and >= 0.8)"
        )
        print(
            f"  worker memory after ingest (worker + timer process): VmRSS {rss:.0f} MB, "
            f"peak VmHWM {hwm:.0f} MB"
        )
        assert ones[0].restart is not None
        kept, empty = ones[0].restart
        print(
            f"  restart to ready: data directory kept {kept:.1f} s, empty {empty:.1f} s "
            f"(tables rebuilt from the changelogs of {events:,} events)"
        )
        two = await run_workers(prefix, events, 2)
        memory = ", ".join(f"{r:.0f} MB" for r, _ in two.rss)
        print(
            f"  two workers (one group)                  {two.rate:>9,.0f} events/s  "
            f"ratio to one {two.rate / one.rate:.2f}   (VmRSS {memory})"
        )
        for label, ran in (("one worker ", one), ("two workers", two)):
            if ran.cpu is not None:
                print(f"  {label}: {ran.cpu.text('workers')}")
        runs = [(f"one worker (round {i})", r.checksum) for i, r in enumerate(ones, 1)]
        for label, got in [*runs, ("two workers", two.checksum)]:
            if got != expected:
                print(f"  WARNING: {label} wrote other rows than the bare pipeline: {got[:2]}")
    finally:
        await drop_topics(prefix)
    detail = f"{events:,} events x 2 offsets"
    return [
        measure(
            "ingest: one worker vs bare pipeline",
            "events/s",
            one.rate,
            bare,
            targets=targets(INGEST),
            bench="ingest",
            detail=detail + "; reference: aiokafka + json + asyncpg, same rows, batches of 500",
        ),
        measure(
            "ingest: bare aiokafka consume only",
            "msgs/s",
            consumed,
            bench="ingest",
            detail=detail + "; no processing (the ceiling Kafka and the client set)",
        ),
        measure(
            "ingest: worker RSS after ingest",
            "MB",
            rss,
            targets=[Target("<=", RSS_LIMIT_MB)],
            higher_is_better=False,
            bench="ingest",
            detail=f"VmRSS of the one worker (both its processes) after {events:,} events; "
            f"peak VmHWM {hwm:.0f} MB",
        ),
        measure(
            "ingest: ready with an empty data dir",
            "s",
            empty,
            kept,
            higher_is_better=False,
            bench="ingest",
            detail=f"a restarted worker whose tables recover from changelogs of {events:,} "
            "events (an emptyDir); reference: the same restart with its data directory kept",
        ),
        measure(
            "ingest: two workers vs one",
            "events/s",
            two.rate,
            one.rate,
            bench="ingest",
            detail=detail + f"; {settings.topic_partitions} partitions, one consumer group",
        ),
        *scale_measures(
            "ingest",
            "worker",
            one.cpu,
            two.cpu,
            detail + "; the workers' processes and their timer processes, measured window",
        ),
    ]
