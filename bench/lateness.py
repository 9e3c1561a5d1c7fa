"""Reminder lateness at ten times the load (SPEC §5): ``rate`` reminders/s coming due for
``seconds`` s while the same worker ingests ``background`` events/s of other calendar events
(not soon due, produced at that pace during the window); p99 DueAt -> on the topic <= 100 ms.

The due reminders' rows (one event per reminder, offset 0: DueAt = StartAt) are written
before the worker starts, with the bare pipeline's statements (the same rows the worker
writes), so the window does not depend on how fast the worker ingests them; the started
worker's dispatcher finds the first DueAt and wakes for it. A consumer in this process notes
when each ReminderDueEvent arrives; "DueAt -> outbox commit" comes from ops.outbox.created_at.

The window is measured warm: the same load runs ``warmup`` s before it (reminders coming due,
events ingested) and those reminders are not counted. Right after the stack starts, Kafka's
JVM needs about a minute of this load to settle (compiling its hot paths): in that minute
it took 30-59% of a core against about 20% warm, and p99 came out up to twice the warm one
(docs/benchmarks.md). The warm-up's own p99 is printed and reported beside the measured one.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import resource
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from bench.common import (
    KAFKA_BOOTSTRAP,
    calendar_event,
    database,
    drop_topics,
    pct,
    scratch_dir,
    summary,
)
from bench.pipeline import write_batch
from bench.progress import Progress
from bench.quiet import quiet
from bench.report import Measure, Target, measure
from bench.targets import LATENESS_P99, targets
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

QUICK = {"rate": 100, "seconds": 10, "background": 200, "warmup": 3, "high_rate": 300}
HIGH_RATE = 3000  # the second figure: the same window at 3,000 due/s, reported
WRITE_RATE = 10_000  # due rows written per second before the window, at the least (lead)
QUIET_DEADLINE_S = 10.0
WARMUP = 2.0  # the background producer starts this long before the first DueAt
OUTBOX_LATENESS = """
SELECT extract(epoch FROM o.created_at - r.due_at) AS s
FROM ops.outbox o
JOIN calendar.event_reminders r ON r.reminder_id = (o.payload::jsonb->>'ReminderId')::uuid
WHERE r.due_at >= $1
"""


def warmup_default() -> float:
    """Seconds of the same load before the measured window (not counted)."""
    return float(os.environ.get("BENCH_LATENESS_WARMUP", "60"))


def lead_default() -> float:
    """Seconds from writing the due rows to the first DueAt: covers the worker's start."""
    return float(os.environ.get("BENCH_LATENESS_LEAD", "30"))


async def prewrite(url: str, first_due: datetime, rate: int, total: int) -> None:
    now = datetime.now(UTC)
    bodies = [
        calendar_event(first_due + timedelta(seconds=k / rate), [0], now) for k in range(total)
    ]
    conn = await asyncpg.connect(url)
    try:
        with Progress("  writing the due reminders", total=total, unit="rows") as progress:
            for lo in range(0, total, 5000):
                await write_batch(conn, [(b, None, None) for b in bodies[lo : lo + 5000]])
                progress.update(min(total, lo + 5000))
        await conn.execute("VACUUM ANALYZE calendar.events, calendar.event_reminders")
    finally:
        await conn.close()


async def paced(topic: str, bodies: list[tuple[bytes, bytes]], rate: int) -> float:
    """Send ``bodies`` at ``rate``/s on a steady schedule; returns the seconds it took."""
    producer = AIOKafkaProducer(bootstrap_servers=KAFKA_BOOTSTRAP, linger_ms=5)
    await producer.start()
    try:
        sent, t0 = 0, time.monotonic()
        while sent < len(bodies):
            target = min(len(bodies), int((time.monotonic() - t0) * rate) + 1)
            while sent < target:
                key, value = bodies[sent]
                await producer.send(topic, value, key=key)
                sent += 1
            await asyncio.sleep(0.01)
        await producer.flush()
        return time.monotonic() - t0
    finally:
        await producer.stop()


async def run(
    rate: int = 1000,
    seconds: int = 60,
    background: int = 2000,
    lead: float | None = None,
    warmup: float | None = None,
    high_rate: int = HIGH_RATE,
) -> list[Measure]:
    """The target window at ``rate`` due/s, then the same at ``high_rate`` due/s (reported:
    where the tail goes past the target, and why, is in docs/benchmarks.md)."""
    measures = await _run(rate, seconds, background, lead, warmup, targeted=True)
    if high_rate:
        measures += await _run(high_rate, seconds, background, lead, warmup, targeted=False)
    return measures


async def _run(
    rate: int,
    seconds: int,
    background: int,
    lead: float | None,
    warmup: float | None,
    targeted: bool,
) -> list[Measure]:
    warm = int(warmup if warmup is not None else warmup_default())
    # Writing the due rows comes before the first DueAt: more rows need a longer lead.
    lead = (lead if lead is not None else lead_default()) + rate * (warm + seconds) / WRITE_RATE
    print(
        f"\n== lateness: {rate:,}/s reminders coming due for {seconds} s ({rate * seconds:,}) "
        f"while the worker ingests {background:,} events/s, after {warm} s of the same load =="
    )
    prefix = f"bench{uuid.uuid4().hex[:8]}."
    settings = Settings(kafka_bootstrap=KAFKA_BOOTSTRAP, topic_prefix=prefix)
    with scratch_dir("bench-lateness-") as tmp:
        try:
            await ensure_topics(settings, contract_topic_names(settings))
            async with database() as url:
                first_due = datetime.now(UTC) + timedelta(seconds=lead)
                window = Window(first_due, rate, warm, seconds, background)
                await prewrite(url, first_due, rate, window.total)
                # The rows just written leave dirty buffers: flush them before the window.
                await quiet("the lateness window", deadline_s=QUIET_DEADLINE_S)
                worker = WorkerProcess(
                    worker_env(url, KAFKA_BOOTSTRAP, prefix), tmp, "bench-worker"
                )
                try:
                    worker.start()
                    started = time.monotonic()
                    await worker.wait_ready(timeout=lead)
                    margin = (first_due - datetime.now(UTC)).total_seconds()
                    print(
                        f"  worker ready in {time.monotonic() - started:.1f} s; "
                        f"first DueAt in {margin:.1f} s"
                    )
                    if margin < WARMUP + 1:
                        raise RuntimeError(
                            f"the worker was ready {WARMUP + 1 - margin:.1f} s too late for the "
                            "first DueAt: raise BENCH_LATENESS_LEAD"
                        )
                    return await _window(settings, url, window, worker.pids, targeted)
                finally:
                    worker.stop()
        finally:
            await drop_topics(prefix)


@dataclass(frozen=True)
class Window:
    """Reminders come due from ``first_due`` at ``rate``/s: ``warmup`` s not counted, then
    ``seconds`` s measured; ``background`` events/s ingested all along."""

    first_due: datetime
    rate: int
    warmup: int
    seconds: int
    background: int

    @property
    def measured_from(self) -> datetime:
        return self.first_due + timedelta(seconds=self.warmup)

    @property
    def total(self) -> int:
        return self.rate * (self.warmup + self.seconds)


async def _window(
    settings: Settings, url: str, w: Window, worker_pids: list[int], targeted: bool
) -> list[Measure]:
    consumer = AIOKafkaConsumer(
        settings.topic("pin.calendar.reminder-due.v1"),
        bootstrap_servers=KAFKA_BOOTSTRAP,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    arrivals: dict[str, float] = {}
    stamped: dict[str, float] = {}  # by the record's own timestamp (the relay's producer)
    dues: dict[str, float] = {}
    progress = Progress("  reminders on the topic", total=w.total, unit="reminders")

    async def collect() -> None:
        while len(arrivals) < w.total:
            batch = await consumer.getmany(timeout_ms=100)
            now = time.time()
            for records in batch.values():
                for r in records:
                    body = json.loads(r.value or b"{}")
                    due = datetime.fromisoformat(body["StartAt"]).timestamp()
                    arrivals.setdefault(body["ReminderId"], now - due)
                    stamped.setdefault(body["ReminderId"], r.timestamp / 1000 - due)
                    dues.setdefault(body["ReminderId"], due)
            progress.update(len(arrivals))

    async def cpu_of_measured_window() -> tuple[float, dict[int, float]]:
        """CPU seconds of the worker's processes from the measured window's first DueAt."""
        await asyncio.sleep(max(0.0, (w.measured_from - datetime.now(UTC)).total_seconds()))
        return time.monotonic(), _process_cpu(worker_pids)

    # Other events, not soon due (a month ahead, 2 offsets), encoded before the window.
    far, now = w.first_due + timedelta(days=30), datetime.now(UTC)
    count = int(w.background * (w.warmup + w.seconds + WARMUP))
    bodies = [calendar_event(far + timedelta(milliseconds=i), [60, 15], now) for i in range(count)]
    encoded = [(b["EventId"].encode(), json.dumps(b).encode()) for b in bodies]
    del bodies
    collector = asyncio.create_task(collect())
    conn = await asyncpg.connect(url)
    try:
        await asyncio.sleep(max(0.0, (w.first_due - datetime.now(UTC)).total_seconds() - WARMUP))
        cpu = _cpu_seconds()
        tree_at = asyncio.create_task(cpu_of_measured_window())
        took = await paced(settings.topic("pin.calendar.events.v1"), encoded, w.background)
        harness = (_cpu_seconds() - cpu) / took
        began, tree = await tree_at
        span = max(1e-9, time.monotonic() - began)
        shares = {pid: (t - tree[pid]) / span for pid, t in _process_cpu(list(tree)).items()}
        stored = await conn.fetchval(
            "SELECT count(*) FROM calendar.events WHERE start_at >= $1", far
        )
        end = w.first_due + timedelta(seconds=w.warmup + w.seconds + 60)
        left = (end - datetime.now(UTC)).total_seconds()
        await asyncio.wait_for(asyncio.shield(collector), timeout=max(1.0, left))
    except TimeoutError:
        pass
    finally:
        collector.cancel()
        await asyncio.gather(collector, return_exceptions=True)
        progress.close()
        await consumer.stop()
    try:
        outbox = [float(r["s"]) * 1000 for r in await conn.fetch(OUTBOX_LATENESS, w.measured_from)]
    finally:
        await conn.close()
    if os.environ.get("BENCH_LATENESS_SERIES"):
        _write_series(Path(os.environ["BENCH_LATENESS_SERIES"]), dues, arrivals, stamped)
    cut = w.measured_from.timestamp()
    measured = {rid for rid, due in dues.items() if due >= cut}
    topic = [s * 1000 for rid, s in arrivals.items() if rid in measured]
    stamp = [s * 1000 for rid, s in stamped.items() if rid in measured]
    warm = [s * 1000 for rid, s in arrivals.items() if rid not in measured]
    missing = w.total - len(arrivals)
    print(f"  background: {count:,} events sent in {took:.1f} s ({count / took:,.0f}/s); "
          f"{stored:,} stored when the last was sent")  # fmt: skip
    print(f"  this process (load generator and topic consumer) used {harness:.0%} of a core")
    # The worker first, then its timer process (dispatcher and relay).
    worker_share, timers_share = [*shares.values(), math.nan, math.nan][:2]
    print(
        f"  measured window: the worker used {worker_share:.0%} of a core, "
        f"its timer process {timers_share:.0%}"
    )
    print(
        f"  warm-up, first {w.warmup} s (not counted): DueAt -> on the topic (ms): {summary(warm)}"
    )
    print(f"  DueAt -> outbox commit (ms): {summary(outbox)}")
    print(f"  DueAt -> on the topic  (ms): {summary(topic)}")
    print(f"  DueAt -> record timestamp (ms, the relay's send): {summary(stamp)}")
    if missing:
        print(f"  WARNING: {missing:,} of {w.total:,} due reminders did not reach the topic")
    detail = (
        f"{w.rate:,} due/s for {w.seconds} s + {w.background:,} events/s ingested, "
        f"after {w.warmup} s of the same load"
    )

    # The target window keeps the measures' names; the 3,000 due/s window is reported
    # under its rate.
    label = "lateness" if targeted else f"lateness at {w.rate:,} due/s"

    def row(name: str, value: float, bounds: list[Target] | None = None) -> Measure:
        return measure(label + name.removeprefix("lateness"), "ms", value,
                       targets=bounds if bounds and targeted else [], higher_is_better=False,
                       bench="lateness", detail=detail)  # fmt: skip

    measures = [
        row(LATENESS_P99, pct(topic, 99), targets(LATENESS_P99)),
        row("lateness: DueAt -> on the topic, p50", pct(topic, 50)),
        row("lateness: DueAt -> on the topic, p95", pct(topic, 95)),
        row("lateness: DueAt -> on the topic, max", max(topic, default=float("nan"))),
        row("lateness: DueAt -> outbox commit, p99", pct(outbox, 99)),
        row("lateness: warm-up window (not counted), p99", pct(warm, 99)),
        measure(f"{label}: timer process CPU per due reminder", "ms",
                timers_share * 1000 / w.rate, higher_is_better=False, bench="lateness",
                detail="its CPU time in the measured window / the reminders coming due in it"),
        measure(
            f"{label}: background events stored during the window",
            "events/s",
            stored / took,
            bench="lateness",
            detail=f"{count:,} sent at {w.background:,}/s; stored by the time the last was sent",
        ),
    ]  # fmt: skip
    if missing:
        measures.append(
            measure(f"{label}: due reminders missing on the topic", "", missing,
                    targets=[Target("<=", 0)], higher_is_better=False, bench="lateness")
        )  # fmt: skip
    return measures


def _write_series(
    path: Path, dues: dict[str, float], arrivals: dict[str, float], stamped: dict[str, float]
) -> None:
    """One line per reminder, by DueAt: DueAt (epoch s), ms to the topic, ms to the relay's
    send. To see whether a tail is spread out or comes in bursts (and how often)."""
    rows = sorted((due, arrivals[rid] * 1000, stamped[rid] * 1000) for rid, due in dues.items())
    path.write_text("".join(f"{d:.3f} {a:.1f} {s:.1f}\n" for d, a, s in rows))
    print(f"  series of {len(rows):,} reminders written to {path}")


def _process_cpu(pids: list[int]) -> dict[int, float]:
    """CPU seconds (user + system) each process has used so far (/proc), in ``pids`` order;
    a process gone is left out."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
