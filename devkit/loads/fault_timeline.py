"""The fault matrix's knobs (environment), its timeline, the faults it puts into workers,
Kafka and PostgreSQL along it, and the automation input it sends meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg

from devkit.loads.calendar_load import CalendarLoad
from devkit.loads.reminder_audit import FaultWindow
from devkit.loads.slice_loads import SOURCES_TOPIC, AckedSender, AutomationLoad
from devkit.stacks.private_stack import PrivateStack
from devkit.workers import ROOT, WorkerProcess

EVENTS_TOPIC = "pin.calendar.events.v1"
SEED = int(os.environ.get("FAULTS_SEED", str(random.SystemRandom().randrange(1_000_000))))
PRODUCE_SECONDS = float(os.environ.get("FAULTS_PRODUCE_SECONDS", "120"))
RATE = float(os.environ.get("FAULTS_RATE", "3"))
CACHE_KILLS = int(os.environ.get("FAULTS_CACHE_KILLS", "3"))
AFTER_COMMIT_PASS = int(os.environ.get("FAULTS_AFTER_COMMIT_PASS", "6"))
STORM_EVENTS = int(os.environ.get("FAULTS_STORM_EVENTS", "40"))
STORM_SECONDS = 15.0
CACHE_KILL_AT = (12, 45, 85)
DOC_OWNERS = int(os.environ.get("FAULTS_DOC_OWNERS", "50"))
AUTOMATION_SOURCES = int(os.environ.get("FAULTS_AUTOMATION_SOURCES", "60"))
SCALE = PRODUCE_SECONDS / 120.0
GRACE_SECONDS = 20.0
# Hand retries of a document-expiry day whose run another fault broke.
RUN_RETRIES = 3
QUIESCE_TIMEOUT = 90.0
# An effect is attributed to every fault in force within this much of its due time.
SLACK = timedelta(seconds=15)
WORKERS = 3


def at(seconds: float) -> float:
    return seconds * SCALE


# What a helper's PostgreSQL call raises while the timeline's immediate restart is under way
# (the harness must outlive its own faults: the restart can fall on any day's run).
PG_DOWN = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


@dataclass
class Timeline:
    """Faults as injected (named windows for the table) and worker exits nobody asked for."""

    started: float = field(default_factory=time.monotonic)
    windows: list[FaultWindow] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    unexpected_exits: list[str] = field(default_factory=list)
    busy: set[str] = field(default_factory=set)
    """Workers a fault is handling: the watcher leaves them alone."""

    def note(self, text: str) -> None:
        self.log.append(f"t={time.monotonic() - self.started:6.1f}s {text}")

    def window(self, name: str, began: datetime, ended: datetime | None = None) -> None:
        self.windows.append(FaultWindow(name, began, ended or datetime.now(UTC)))

    async def until(self, seconds: float) -> None:
        delay = self.started + seconds - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    def counts(self) -> Counter[str]:
        return Counter(w.name for w in self.windows)


async def cli(env: dict[str, str], *args: str, timeout: float = 180) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "streams",
        *args,
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode or 0, out.decode() + err.decode()[-1500:]


def timer_process_pid(worker: WorkerProcess) -> int:
    """The worker's timer process (its child running ``streams.timer_process``)."""
    for pid in worker.pids[1:]:
        with contextlib.suppress(OSError):
            if b"streams.timer_process" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
    raise AssertionError(f"{worker.name} has no timer process: {worker.pids}")


async def cache_write_kills(tl: Timeline, worker: WorkerProcess, calendar: CalendarLoad) -> None:
    """CACHE_KILLS rounds: the calendar load starts moving a burst of events (each moved back
    about 20 s later) and the worker is restarted with STREAMS_FAULT=applier.after_commit:<n>;
    it SIGKILLs itself after its n-th committed batch (likely one holding moves) before the
    cache write, so the reverts come to a cache that lags the ledger. It is started again
    without the fault point."""
    for round_, when in enumerate(CACHE_KILL_AT[:CACHE_KILLS]):
        await tl.until(at(when))
        began = datetime.now(UTC)
        tl.busy.add(worker.name)
        try:
            await asyncio.to_thread(worker.stop)
            planned = calendar.storm(time.monotonic(), STORM_EVENTS, over=STORM_SECONDS)
            worker.env["STREAMS_FAULT"] = f"applier.after_commit:{AFTER_COMMIT_PASS}"
            worker.start()
            tl.note(
                f"{worker.name} restarted with the fault point (round {round_ + 1}); "
                f"calendar storm: {planned} events moved over {STORM_SECONDS:.0f}s"
            )
        finally:
            tl.busy.discard(worker.name)  # armed: the watcher leaves it to this task
        assert worker.proc is not None
        proc = worker.proc
        try:
            rc = await asyncio.wait_for(asyncio.to_thread(proc.wait), 120)
        except TimeoutError:
            tl.note(f"{worker.name}: fault point not reached in round {round_ + 1}")
            rc = None
        tl.busy.add(worker.name)
        try:
            worker.env.pop("STREAMS_FAULT", None)
            if rc is None:
                await asyncio.to_thread(worker.stop)
            else:
                assert rc == -signal.SIGKILL, f"{worker.name} exited {rc}, not by its fault point"
                tl.note(f"{worker.name} SIGKILLed itself after a commit, before its cache write")
            worker.start()
        finally:
            tl.busy.discard(worker.name)
        if rc is not None:
            tl.window(
                "SIGKILL between commit and cache write",
                began,
                datetime.now(UTC) + timedelta(seconds=30),
            )


async def rebalance(tl: Timeline, extra: WorkerProcess) -> None:
    await tl.until(at(20))
    began = datetime.now(UTC)
    extra.start()
    tl.note(f"{extra.name} started (rebalance)")
    await extra.wait_ready(timeout=180)
    tl.window("rebalance mid-batch", began)
    await tl.until(at(50))
    began = datetime.now(UTC)
    rc = await asyncio.to_thread(extra.stop)
    tl.note(f"{extra.name} stopped (rebalance), rc {rc}")
    tl.window("rebalance mid-batch", began, datetime.now(UTC) + timedelta(seconds=10))


async def broker_restart(tl: Timeline, stack: PrivateStack) -> None:
    await tl.until(at(40))
    began = datetime.now(UTC)
    pid = await asyncio.to_thread(stack.kill_broker)
    await asyncio.to_thread(stack.start_broker)
    tl.note(f"broker pid {pid} SIGKILLed and started again")
    tl.window("broker SIGKILL + start", began, datetime.now(UTC) + timedelta(seconds=10))


async def stop_worker(tl: Timeline, worker: WorkerProcess) -> None:
    await tl.until(at(62))
    began = datetime.now(UTC)
    tl.busy.add(worker.name)
    try:
        worker.signal_all(signal.SIGSTOP)
        tl.note(f"{worker.name} SIGSTOPped (both processes)")
        await tl.until(at(62) + 20)
        worker.signal_all(signal.SIGCONT)
        tl.note(f"{worker.name} SIGCONTed")
    finally:
        tl.busy.discard(worker.name)
    tl.window("SIGSTOP of a worker", began, datetime.now(UTC) + timedelta(seconds=10))


async def stop_timer_process(tl: Timeline, worker: WorkerProcess) -> None:
    await tl.until(at(70))
    pid = timer_process_pid(worker)
    began = datetime.now(UTC)
    os.kill(pid, signal.SIGSTOP)
    tl.note(f"{worker.name}'s timer process {pid} SIGSTOPped")
    try:
        await tl.until(at(70) + 22)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    tl.note(f"{worker.name}'s timer process {pid} SIGCONTed")
    tl.window("SIGSTOP of a timer process", began, datetime.now(UTC) + timedelta(seconds=10))


async def postgres_restart(tl: Timeline, stack: PrivateStack) -> None:
    await tl.until(at(115))
    began = datetime.now(UTC)
    await asyncio.to_thread(stack.restart_postgres_immediate)
    durable = await asyncio.to_thread(stack.settings, *PrivateStack.DURABLE)
    tl.note(f"PostgreSQL restarted in immediate mode ({durable})")
    assert durable == PrivateStack.DURABLE
    tl.window("PostgreSQL immediate restart", began, datetime.now(UTC) + timedelta(seconds=10))


async def watch_workers(tl: Timeline, workers: list[WorkerProcess]) -> None:
    """A worker that exits by itself is a finding: note it and start it again."""
    while True:
        for w in workers:
            if w.name in tl.busy or w.proc is None or w.proc.poll() is None:
                continue
            if w.env.get("STREAMS_FAULT"):
                continue  # its own fault point: cache_write_kills restarts it
            tl.unexpected_exits.append(f"{w.name} rc={w.proc.returncode}: {w.tail(15)}")
            tl.note(f"{w.name} exited by itself (rc {w.proc.returncode})")
            w.start()
        await asyncio.sleep(0.5)


async def automation_sources(tl: Timeline, load: AutomationLoad, sender: AckedSender) -> None:
    versions: Counter[uuid.UUID] = Counter()
    for offset, kind, guid in load.plan():
        await tl.until(offset)
        versions[guid] += 1
        msg = load.message(kind, guid, versions[guid])
        if msg is None:
            continue
        key = f"Booking:{guid}"
        load.acked_sources.append(await sender.send(SOURCES_TOPIC, key, msg, kind))
