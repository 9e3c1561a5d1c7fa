"""Recovery from a crashed or restarted worker: three workers under a steady calendar load,
a no-fault phase, then ``kills`` SIGKILLs of a random worker (restarted at once, one every
``interval`` s), then a rolling restart (SIGTERM each worker in turn, start it again, wait
until it is ready).

The load is new calendar events at ``rate``/s, each with one reminder due 30-60 s after it
is sent, so every reminder's event reaches the workers well before it is due when nothing
goes wrong. A reminder belongs to the phase its DueAt falls in (the no-fault phase, the
kills and the 30 s after the last, the rolling restart and the 30 s after it); its lateness
is DueAt -> its first record on pin.calendar.reminder-due.v1 (the relay's timestamp).

Per kill, from the workers' own logs (LOG_FORMAT=json): the first revocation (the group
noticed), the final generation joined, its assignment synced, the tables' recovery done
(Faust's "Worker ready") and the first record consumed on each partition of the calendar
input (``partition_first_record``, streams/input/gaps.py). Time-to-resume = SIGKILL -> the
last partition consumed again. At the end the group's committed offset of every input
partition must reach its end offset, and the output topic is audited for exactly once.

Runs on the shared stack; not in the default set (``python -m bench recovery``): about 7
minutes.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from bench.common import KAFKA_BOOTSTRAP, database, drop_topics, pct, scratch_dir
from bench.recovery_steps import Fault, LogLine, Phase, read_logs, steps_after
from bench.report import Measure, Target, measure
from devkit.loads.calendar_load import Identity, calendar_message, parse_time
from devkit.loads.reminder_audit import DUE_TOPIC, audit, decode, read_to_end
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

QUICK = {"rate": 10.0, "kills": 2, "interval": 20.0, "calm": 40.0}
EVENTS = "pin.calendar.events.v1"
LEAD = (30.0, 60.0)  # seconds from sending an event to its reminder's DueAt
TAIL = 30.0  # reminders due this long after a phase's last fault still belong to it
WORKERS = 3
BENCH = "recovery"


def fmt(v: float | None) -> str:
    return "    -" if v is None else f"{v:5.1f}"


class Load:
    """New calendar events at ``rate``/s, each with one reminder (offset 0) 30-60 s ahead."""

    def __init__(self, topic: str, rate: float, seed: int) -> None:
        self.topic = topic
        self.rate = rate
        self.rng = random.Random(seed)
        self.expected: dict[Identity, float] = {}  # reminder -> when its event was acked
        self.stop = asyncio.Event()
        self.errors = 0

    async def run(self) -> None:
        producer: AIOKafkaProducer | None = None
        sent, t0 = 0, time.monotonic()
        try:
            while not self.stop.is_set():
                target = int((time.monotonic() - t0) * self.rate) + 1
                while sent < target and not self.stop.is_set():
                    now = datetime.now(UTC)
                    start = now + timedelta(seconds=self.rng.uniform(*LEAD))
                    msg = calendar_message(
                        event_id=str(uuid.uuid4()),
                        tenant_id=str(uuid.uuid4()),
                        owner_user_id=str(uuid.uuid4()),
                        start_at=start,
                        offsets=[0],
                        version=1,
                        occurred_at=now,
                    )
                    while True:
                        try:
                            if producer is None:
                                producer = AIOKafkaProducer(
                                    bootstrap_servers=KAFKA_BOOTSTRAP,
                                    acks="all",
                                    enable_idempotence=True,
                                )
                                await producer.start()
                            await producer.send_and_wait(
                                self.topic, json.dumps(msg).encode(), key=msg["EventId"].encode()
                            )
                            break
                        except (KafkaError, OSError, TimeoutError):
                            self.errors += 1
                            await asyncio.sleep(0.5)
                    ident = Identity(msg["EventId"], 0, parse_time(msg["StartAt"]))
                    self.expected[ident] = time.time()
                    sent += 1
                await asyncio.sleep(0.02)
        finally:
            if producer is not None:
                await producer.stop()


async def committed_vs_end(group: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """Per partition of ``topic``: (the group's committed offset, the end offset)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    admin = AIOKafkaAdminClient(bootstrap_servers=KAFKA_BOOTSTRAP)
    consumer = AIOKafkaConsumer(bootstrap_servers=KAFKA_BOOTSTRAP, group_id=None)
    await admin.start()
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps)
        committed = await admin.list_consumer_group_offsets(group, partitions=tps)
        return {
            tp.partition: (committed[tp].offset if tp in committed else -1, ends[tp]) for tp in tps
        }
    finally:
        await consumer.stop()
        await admin.close()


async def run(
    rate: float = 20.0,
    kills: int = 6,
    interval: float = 20.0,
    calm: float = 60.0,
    seed: int | None = None,
) -> list[Measure]:
    seed = seed if seed is not None else int(os.environ.get("BENCH_RECOVERY_SEED", "7"))
    print(
        f"\n== recovery: {WORKERS} workers, {rate:g} events/s (reminders 30-60 s ahead), "
        f"{calm:g} s without faults, {kills} SIGKILLs {interval:g} s apart, a rolling restart =="
    )
    prefix = f"bench{uuid.uuid4().hex[:8]}."
    settings = Settings(kafka_bootstrap=KAFKA_BOOTSTRAP, topic_prefix=prefix)
    with scratch_dir("bench-recovery-") as tmp:
        try:
            await ensure_topics(settings, contract_topic_names(settings))
            async with database() as url:
                return await _run(settings, url, tmp, rate, kills, interval, calm, seed)
        finally:
            await drop_topics(prefix)


async def _run(
    settings: Settings,
    url: str,
    tmp: Path,
    rate: float,
    kills: int,
    interval: float,
    calm: float,
    seed: int,
) -> list[Measure]:
    env = worker_env(url, KAFKA_BOOTSTRAP, settings.topic_prefix, LOG_FORMAT="json")
    workers = [WorkerProcess(env, tmp, f"w{i}") for i in range(WORKERS)]
    rng = random.Random(seed)
    input_topic = settings.topic(EVENTS)
    load = Load(input_topic, rate, seed)
    producing: asyncio.Task[None] | None = None
    phases: list[Phase] = []
    try:
        for w in workers:
            w.start()
        for w in workers:
            await w.wait_ready(timeout=180)
        print("  three workers ready; the load starts")
        t0 = time.time()
        producing = asyncio.create_task(load.run())
        await asyncio.sleep(calm)
        phases.append(Phase("no faults", t0 + LEAD[0], time.time()))

        kill_phase = Phase("SIGKILLs", time.time(), 0.0)
        for k in range(kills):
            victim = rng.choice(workers)
            kill_phase.faults.append(Fault("kill", victim.name, time.time()))
            victim.kill()
            victim.start()
            print(f"  kill {k + 1}/{kills}: {victim.name} SIGKILLed and started again")
            await asyncio.sleep(interval)
        for w in workers:
            await w.wait_ready(timeout=180)
        await asyncio.sleep(max(0.0, TAIL - interval))
        kill_phase.end = kill_phase.faults[-1].at + TAIL
        phases.append(kill_phase)

        roll = Phase("rolling restart", time.time(), 0.0)
        for w in workers:
            fault = Fault("term", w.name, time.time())
            roll.faults.append(fault)
            w.stop(signal.SIGTERM, timeout=60)
            fault.exited_after = time.time() - fault.at
            w.start()
            await w.wait_ready(timeout=180)
            print(f"  {w.name}: SIGTERM, exited in {fault.exited_after:.1f} s, ready again")
        await asyncio.sleep(TAIL)
        roll.end = roll.faults[-1].at + TAIL
        phases.append(roll)
        load.stop.set()
        await producing
        last_due = max(i.due_at for i in load.expected).timestamp()
        wait = max(0.0, last_due - time.time()) + 20.0
        print(f"  load stopped ({len(load.expected)} reminders); waiting {wait:.0f} s for the last")
        await asyncio.sleep(wait)
        offsets = await committed_vs_end(env["APP_ID"], input_topic, settings.topic_partitions)
        lines = read_logs(workers)
    finally:
        load.stop.set()
        if producing is not None:
            await asyncio.gather(producing, return_exceptions=True)
        for w in workers:
            w.stop()

    records = await read_to_end(KAFKA_BOOTSTRAP, settings.topic(DUE_TOPIC))
    return report(phases, lines, records, load, offsets, input_topic, settings.topic_partitions)


def report(
    phases: list[Phase],
    lines: list[LogLine],
    records: list[Any],
    load: Load,
    offsets: dict[int, tuple[int, int]],
    input_topic: str,
    partitions: int,
) -> list[Measure]:
    checked = audit(records, load.expected, {})
    first: dict[Identity, float] = {}
    for r in records:
        p = decode(r)
        at = p.timestamp.timestamp()
        if p.identity not in first or at < first[p.identity]:
            first[p.identity] = at

    lateness: dict[str, list[float]] = {}
    for ph in phases:
        lateness[ph.name] = [
            first[i] - i.due_at.timestamp()
            for i in load.expected
            if ph.start <= i.due_at.timestamp() < ph.end and i in first
        ]

    faults = [f for ph in phases for f in ph.faults]
    print("\n  per fault (s after the signal): noticed = first revocation; joined/synced = the")
    print("  final generation; ready = tables recovered (Faust's Worker ready); resumed = the")
    print("  last input partition consumed again")
    print(f"  {'fault':<12} {'gen':>4} {'noticed':>7} {'joined':>6} {'synced':>6} "
          f"{'ready':>6} {'resumed':>7}  per partition")  # fmt: skip
    resume: dict[str, list[float]] = {"kill": [], "term": []}
    for f in faults:
        s = steps_after(lines, f, input_topic, partitions)
        if s.resumed is not None:
            resume[f.kind].append(s.resumed)
        per = " ".join(f"p{p}={v:.1f}" for p, v in sorted(s.consumed.items()) if p >= 0)
        label = f"{'SIGKILL' if f.kind == 'kill' else 'SIGTERM'} {f.worker}"
        gen = "-" if s.generation is None else str(s.generation)
        print(f"  {label:<12} {gen:>4} {fmt(s.noticed):>7} {fmt(s.joined):>6} "
              f"{fmt(s.synced):>6} {fmt(s.ready):>6} {fmt(s.resumed):>7}  {per}")  # fmt: skip
    terms = [f for f in faults if f.kind == "term"]
    if terms:
        print(
            "  SIGTERM -> exited: " + ", ".join(f"{f.worker} {f.exited_after:.1f} s" for f in terms)
        )

    print(f"\n  {'phase':<16} {'reminders':>9} {'p50 s':>7} {'p99 s':>7} {'max s':>7}")
    for ph in phases:
        v = lateness[ph.name]
        print(f"  {ph.name:<16} {len(v):>9} {pct(v, 50):>7.2f} {pct(v, 99):>7.2f} "
              f"{max(v, default=float('nan')):>7.2f}")  # fmt: skip
    lag = {p: end - c for p, (c, end) in offsets.items()}
    print("\n  committed vs end offset per input partition: "
          + ", ".join(f"p{p} {c}/{e}" for p, (c, e) in sorted(offsets.items())))  # fmt: skip
    print(
        f"  exactly once: expected {checked.expected}, published {checked.published}, "
        f"lost {len(checked.lost)}, doubled {checked.duplicated_effects}, "
        f"unexpected {sum(checked.unexpected.values())}, re-published {checked.republishes}"
    )
    calm_v = lateness.get("no faults", [])
    kill_v = lateness.get("SIGKILLs", [])
    roll_v = lateness.get("rolling restart", [])
    kills = resume["kill"]
    wrong = len(checked.lost) + checked.duplicated_effects + sum(checked.unexpected.values())

    def m(name: str, unit: str, value: float, targets: list[Target], detail: str = "") -> Measure:
        return measure(
            f"recovery: {name}", unit, value, targets=targets, higher_is_better=False,
            bench=BENCH, detail=detail,
        )  # fmt: skip

    nan = float("nan")
    return [
        m("kill -> partitions consumed again, median", "s",
          statistics.median(kills) if kills else nan, []),
        m("kill -> partitions consumed again, max", "s", max(kills, default=nan),
          [Target("<=", 15)]),
        m("lateness without faults, p99", "s", pct(calm_v, 99), []),
        m("lateness under SIGKILLs, p99", "s", pct(kill_v, 99), [Target("<=", 20)]),
        m("lateness under SIGKILLs, max", "s", max(kill_v, default=nan), [Target("<=", 30)]),
        m("lateness under a rolling restart, p99", "s", pct(roll_v, 99), []),
        m("rolling restart: p99 added", "s", pct(roll_v, 99) - pct(calm_v, 99),
          [Target("<=", 5)]),
        m("input lag left at the end", "records", float(sum(lag.values())), [Target("<=", 0)]),
        m("reminders lost, doubled or unexpected", "", float(wrong), [Target("<=", 0)],
          detail=f"{checked.published} of {checked.expected} published"),
    ]  # fmt: skip
