"""The fault matrix: calendar, document-expiry and automation load at once on three real
workers, every fault class in one timeline, one auditor table from the output topics alone.

The run has a Kafka and a durable PostgreSQL of its own (devkit/stacks/private_stack.py:
fsync, synchronous_commit and full_page_writes on, so a crash cannot forget a commit and
"nothing lost" means something). The loads (devkit/loads/calendar_load.py,
devkit/loads/slice_loads.py) include reverts to earlier states: calendar events moved and
moved back, Planned → Cancelled → Planned; documents Active → Archived → Active and
ExpiresAt moved out and back; automation sources deactivated and reactivated, their dates
and metrics changed and reverted. Expected effects are computed from the acknowledged input
with the pure domain rules; the auditor (devkit/loads/reminder_audit.py) reads
pin.calendar.reminder-due.v1 (per reminder identity), pin.profile.document-expiry-reminders.v1
(per DocumentId and threshold, across events) and pin.automation.dispatch-requested.v1 (per
SchedulerKey) to their end and prints one table: per slice and fault, effects expected /
published / missing / doubled / wrong / re-published; missing, doubled or wrong fail the
run. Doubled = one effect in two outbox records; the same outbox record re-published (same
``outbox-id`` header, which consumers dedupe: a relay pass that timed out on Kafka and
replaced its producer while the old one's retries still landed) is counted in its own
column and allowed.

Workers not ready at the end (the check before the audit) fail with an explanation: each
one's /health, who holds each stalled partition with what committed offset and high
watermark, the group's committed offset on the broker, and the worker's last own log lines
(rebalance steps first; its timer process's cycles left out).

Faults, in one timeline (seconds after the load starts, FAULTS_SCALE stretches it):
  SIGKILL between a commit and its cache write (a worker restarted with
  STREAMS_FAULT=applier.after_commit:<n> while a burst of calendar events is moved and moved
  back, FAULTS_CACHE_KILLS times, restarted without it), a rebalance mid-batch (a fourth
  worker started, then stopped, while input flows), a broker SIGKILL + start, SIGSTOP of a
  worker and SIGSTOP of another worker's timer process (SIGCONT later), a failed daily run
  (the run's table locked, so its first statement times out) and a SIGTERMed daily run of
  document-expiry, each retried by hand for the same slot, and PostgreSQL restarted in
  immediate mode. A day's run that another fault broke (the PostgreSQL restart can fall on
  any day's run) is retried by hand too, as the schedule's slot retry would; every day's
  last attempt must succeed.

Knobs (environment): FAULTS_SEED, FAULTS_PRODUCE_SECONDS, FAULTS_RATE (new calendar events
per second), FAULTS_CACHE_KILLS, FAULTS_AFTER_COMMIT_PASS, FAULTS_STORM_EVENTS, FAULTS_DOC_OWNERS,
FAULTS_AUTOMATION_SOURCES.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from devkit.loads.calendar_load import Acked, CalendarLoad, expected_reminders, run_load
from devkit.loads.reminder_audit import (
    DISPATCH_TOPIC,
    DUE_TOPIC,
    EXPIRY_TOPIC,
    FaultWindow,
    audit,
    audit_effects,
    calendar_effects,
    dispatch_effects,
    expiry_effects,
    format_matrix,
    format_table,
    matrix_rows,
    read_to_end,
)
from devkit.loads.slice_loads import (
    DOCUMENTS_TOPIC,
    SOURCES_TOPIC,
    AckedSender,
    AutomationLoad,
    ExpiryLoad,
)
from devkit.stacks.private_stack import PrivateStack
from devkit.wait import eventually
from devkit.workers import ROOT, WorkerProcess, worker_env

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

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


@pytest.fixture
def durable_stack() -> Iterator[PrivateStack]:
    stack = PrivateStack(durable=True)
    try:
        stack.up()
        yield stack
    finally:
        stack.down()


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


# ---------------------------------------------------------------------- faults


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


# ---------------------------------------------------------------------- document-expiry days


@dataclass
class DayRun:
    day: int
    fault: str | None
    attempts: list[tuple[str, int]] = field(default_factory=list)
    began: datetime | None = None
    ended: datetime | None = None


# What a helper's PostgreSQL call raises while the timeline's immediate restart is under way
# (the harness must outlive its own faults: the restart can fall on any day's run).
PG_DOWN = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


async def applied(db: str, table: str, key: str, want: dict[str, int], timeout: float) -> None:
    """Until every acknowledged Version of ``want`` is in the projection (sequencing only: the
    run of a day must see the states that day's expectation assumes)."""

    async def caught_up() -> bool:
        with contextlib.suppress(*PG_DOWN):
            conn = await asyncpg.connect(db, timeout=5)
            try:
                rows = await conn.fetch(f"SELECT {key}::text AS k, version FROM {table}")
            finally:
                await conn.close()
            stored = {r["k"]: r["version"] for r in rows}
            return all(stored.get(k, -1) >= v for k, v in want.items())
        return False

    await eventually(caught_up, timeout=timeout, what=f"{table} caught up", interval=0.3)


async def locked_runs_table(db: str, release: asyncio.Event, tl: Timeline) -> None:
    """Hold the runs table locked until ``release``; a restart of PostgreSQL meanwhile ends
    the lock with the session (noted: the run may then not fail)."""
    try:
        conn = await asyncpg.connect(db, timeout=10)
        try:
            async with conn.transaction():
                await conn.execute(
                    "LOCK TABLE profile.document_expiry_runs IN ACCESS EXCLUSIVE MODE"
                )
                await release.wait()
        finally:
            with contextlib.suppress(*PG_DOWN):
                await conn.close()
    except PG_DOWN as exc:
        tl.note(f"the runs table lock ended early: {type(exc).__name__}")


async def sigtermed_run(env: dict[str, str], db: str, as_of: str, slot_day: str) -> int:
    """Start the run and SIGTERM it once its slot is claimed and its run has begun."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "streams",
        "timers",
        "run",
        "document-expiry",
        "--as-of",
        as_of,
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    conn: asyncpg.Connection | None = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.returncode is None:
            try:
                if conn is None:
                    conn = await asyncpg.connect(db, timeout=5)
                started = await conn.fetchval(
                    "SELECT count(*) FROM profile.document_expiry_runs WHERE as_of_date = $1::date",
                    datetime.fromisoformat(slot_day).date(),
                )
            except PG_DOWN:
                if conn is not None:
                    conn.terminate()
                conn = None
                await asyncio.sleep(0.3)
                continue
            if started:
                break
            await asyncio.sleep(0.05)
    finally:
        if conn is not None:
            with contextlib.suppress(*PG_DOWN):
                await conn.close()
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    return await asyncio.wait_for(proc.wait(), 60)


async def expiry_days(
    tl: Timeline,
    load: ExpiryLoad,
    sender: AckedSender,
    env: dict[str, str],
    db: str,
    runs: list[DayRun],
) -> None:
    """Days 0-4 during the load, each at its time; the last day runs after the load."""
    schedule = {0: 3, 1: 48, 2: 58, 3: 95, 4: 125}
    faults = {1: "failed daily run", 2: "SIGTERMed daily run"}
    for k, when in sorted(schedule.items()):
        await tl.until(at(when))
        await expiry_day(tl, load, sender, env, db, runs, k, faults.get(k))


async def expiry_day(
    tl: Timeline,
    load: ExpiryLoad,
    sender: AckedSender,
    env: dict[str, str],
    db: str,
    runs: list[DayRun],
    k: int,
    fault: str | None,
) -> None:
    for kind, msg in load.changes(k):
        load.acked.append(await sender.send(DOCUMENTS_TOPIC, msg["OwnerUserId"], msg, kind))
    states = load.snapshot(k)
    await applied(
        db,
        "profile.person_documents",
        "document_id",
        {d: s["Version"] for d, s in states.items()},
        120,
    )
    day = load.day(k).isoformat()
    as_of = f"{day}T12:00:00Z"
    run = DayRun(k, fault, began=datetime.now(UTC))
    runs.append(run)
    args = ("timers", "run", "document-expiry", "--as-of", as_of)
    if fault == "failed daily run":
        release = asyncio.Event()
        holder = asyncio.create_task(locked_runs_table(db, release, tl))
        await asyncio.sleep(0.5)
        try:
            rc, out = await cli(env, *args)
        finally:
            release.set()
            await holder
        run.attempts.append(("locked", rc))
        tl.note(f"expiry day {k}: run with its table locked -> rc {rc} {last_line(out)}")
    elif fault == "SIGTERMed daily run":
        rc = await sigtermed_run(env, db, as_of, day)
        run.attempts.append(("SIGTERM", rc))
        tl.note(f"expiry day {k}: run SIGTERMed -> rc {rc}")
    # The run itself, or the retry of the same slot by hand after a fault.
    rc, out = await cli(env, *args)
    run.attempts.append(("retry" if fault else "run", rc))
    tl.note(f"expiry day {k}: {'retry' if fault else 'run'} -> rc {rc} {last_line(out)}")
    # A run another fault of the timeline broke (the PostgreSQL restart or the broker kill
    # can fall on any day's run) is retried for the same slot, as its schedule's slot retry
    # would; a slot its broken run left claimed is run again with --rerun.
    for _ in range(RUN_RETRIES):
        if rc == 0:
            break
        await postgres_accepts(db, 120)
        again = (*args, "--rerun") if rc == 3 else args
        rc, out = await cli(env, *again)
        run.attempts.append(("rerun" if "--rerun" in again else "retry", rc))
        tl.note(f"expiry day {k}: retry after a failed run -> rc {rc} {last_line(out)}")
    run.ended = datetime.now(UTC)
    if fault:
        tl.window(fault, run.began or run.ended, run.ended)


async def postgres_accepts(db: str, timeout: float) -> None:

    async def accepts() -> bool:
        try:
            conn = await asyncpg.connect(db, timeout=5)
        except PG_DOWN:
            return False
        await conn.close()
        return True

    await eventually(accepts, timeout=timeout, what="PostgreSQL back", interval=0.5)


def last_line(out: str) -> str:
    lines = [x for x in out.splitlines() if x.startswith("timer ")]
    return lines[-1] if lines else out.strip().splitlines()[-1][:200] if out.strip() else ""


# ---------------------------------------------------------------------- automation


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


# ---------------------------------------------------------------------- the end


def input_spans(acked: list[Acked], key: str) -> dict[str, tuple[datetime, datetime]]:
    """Per entity, from the acknowledgement of its first input to that of its last (the
    time its state was in flight; SLACK widens it by the time to apply it)."""
    out: dict[str, tuple[datetime, datetime]] = {}
    for a in acked:
        k = str(a.payload[key])
        lo, hi = out.get(k, (a.acked_at, a.acked_at))
        out[k] = (min(lo, a.acked_at), max(hi, a.acked_at))
    return out


async def wait_quiet(db: str, calendar_versions: dict[str, int], timeout: float) -> dict[str, int]:
    """Until every calendar Version is applied, nothing due is Pending in either ledger and
    the outbox is published (or the timeout passes); returns the last figures."""
    deadline = time.monotonic() + timeout
    figures: dict[str, int] = {}
    while True:
        try:
            conn = await asyncpg.connect(db, timeout=5)
            try:
                rows = await conn.fetch("SELECT event_id::text AS id, version FROM calendar.events")
                stored = {r["id"]: r["version"] for r in rows}
                figures = {
                    "events_behind": sum(
                        stored.get(k, -1) != v for k, v in calendar_versions.items()
                    ),
                    "due_pending": await conn.fetchval(
                        "SELECT count(*) FROM calendar.event_reminders "
                        "WHERE status = 'Pending' AND due_at < now()"
                    ),
                    "automation_due_open": await conn.fetchval(
                        "SELECT count(*) FROM automation.scheduler WHERE status_id = 'Processing' "
                        "OR (status_id = 'Pending' AND due_on < now() AND NOT is_on_support_hold)"
                    ),
                    "outbox_unpublished": await conn.fetchval(
                        "SELECT count(*) FROM ops.outbox WHERE published_at IS NULL"
                    ),
                }
            finally:
                await conn.close()
            if not any(figures.values()):
                return figures
        except PG_DOWN as exc:
            figures = {"error": 1, **figures}
            print(f"quiesce: {exc!r}")
        if time.monotonic() > deadline:
            return figures
        await asyncio.sleep(0.5)


def log_findings(workers: list[WorkerProcess]) -> list[str]:
    """Distinct ERROR/Traceback lines of the worker logs (identifiers only), most common first."""
    found: Counter[str] = Counter()
    for w in workers:
        try:
            text = w.log_path.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if "ERROR" in line or "Traceback" in line or "CRITICAL" in line:
                key = re.sub(r"\d+", "N", line.split("]", 1)[-1].strip())[:160]
                found[key] += 1
    return [f"{n:5d}x {line}" for line, n in found.most_common(12)]


async def first_failure(tasks: list[asyncio.Task[Any]]) -> None:
    """Wait for ``tasks``; a fault that could not be injected ends the run at once."""
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
        for t in done:
            if t.exception() is not None:
                raise t.exception()  # type: ignore[misc]


async def settled(db: str, query: str, want: Callable[[Any], bool], timeout: float) -> None:
    conn = await asyncpg.connect(db)
    try:
        await eventually(
            lambda: conn.fetchval(query),
            timeout=timeout,
            what=f"{query} settled",
            until=want,
            interval=0.3,
        )
    finally:
        await conn.close()


# ---------------------------------------------------------------------- diagnostics

STALL = re.compile(r"^(?P<topic>\S+):(?P<partition>\d+) ")


def worker_lines(worker: WorkerProcess, n: int = 12) -> list[str]:
    """The worker's last log lines that are not its timer process's cycles, and its last
    rebalance steps (a CI tail was all timer-process lines)."""
    try:
        text = worker.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return ["<no log>"]
    own = [x for x in text if "[timer-process]" not in x]
    steps = [x for x in own if "assigned partitions" in x or "Revoking" in x]
    return [*(f"rebalance: {x[:200]}" for x in steps[-4:]), *(x[:240] for x in own[-n:])]


async def group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
        return {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()}
    finally:
        await admin.close()


async def explain_not_ready(workers: list[WorkerProcess], bootstrap: str, group: str) -> str:
    """Why workers are not ready: each one's /health, who holds each stalled partition with
    what committed offset and high watermark (its /status), the group's committed offset
    on the broker, and the worker's last own log lines."""
    lines: list[str] = []
    health: dict[str, Any] = {}
    status: dict[str, Any] = {}
    for w in workers:
        if w.proc is None or w.proc.poll() is not None:
            lines.append(f"{w.name}: not running (rc {w.proc.returncode if w.proc else None})")
            continue
        with contextlib.suppress(OSError, ValueError):
            health[w.name] = (await asyncio.to_thread(w.get, "/health"))[1]
            status[w.name] = (await asyncio.to_thread(w.get, "/status?format=json"))[1]
    stalled: set[tuple[str, int]] = set()
    for name, h in health.items():
        lines.append(f"{name} /health: {h}")
        for agent_stalls in (
            (h.get("stalled_partitions") or {}).values() if isinstance(h, dict) else ()
        ):
            for text in agent_stalls:
                m = STALL.match(text)
                if m:
                    stalled.add((m["topic"], int(m["partition"])))
    group_view: dict[tuple[str, int], int] = {}
    try:
        group_view = await group_offsets(bootstrap, group)
    except Exception as exc:  # a diagnostic must not hide the failure it explains
        lines.append(f"group offsets of {group}: {exc!r}")
    for topic, partition in sorted(stalled):
        where = f"{topic}:{partition}"
        lines.append(
            f"stalled {where}: committed in the group {group_view.get((topic, partition))}"
        )
        for name, st in status.items():
            for agent in st.get("agents", []) if isinstance(st, dict) else []:
                for part in agent.get("partitions", []):
                    if part["partition"] != where:
                        continue
                    mine = [x for x in agent.get("stalled", []) if x["partition"] == where]
                    lines.append(
                        f"  held by {name} ({agent['agent']}): committed {part['committed']} "
                        f"highwater {part['highwater']} stalled {mine}"
                    )
                    if mine and part["committed"] == part["highwater"]:
                        lines.append(
                            "  (nothing left to read: the lag is the stall check's own "
                            "position, behind the committed offset)"
                        )
    for w in workers:
        h = health.get(w.name)
        if h is not None and (not isinstance(h, dict) or h.get("status") != "ready"):
            lines.append(f"{w.name} last lines:")
            lines += [f"  {x}" for x in worker_lines(w)]
    return "\n".join(lines)


async def all_ready(
    workers: list[WorkerProcess], bootstrap: str, group: str, timeout: float
) -> None:
    try:
        await asyncio.gather(*(w.wait_ready(timeout=timeout) for w in workers))
    except AssertionError as exc:
        why = await explain_not_ready(workers, bootstrap, group)
        raise AssertionError(f"{str(exc).splitlines()[0]}\n{why}") from None


@pytest.mark.timeout(720)
async def test_fault_matrix_every_slice_makes_each_effect_once_through_every_fault(
    durable_stack: PrivateStack, tmp_path: Path
) -> None:
    began = time.monotonic()
    stack = durable_stack
    prefix = f"faults{uuid.uuid4().hex[:8]}."
    print(f"\nfault matrix seed {SEED} (FAULTS_SEED={SEED} repeats it)")
    env = worker_env(
        stack.database_url,
        stack.bootstrap,
        prefix,
        TIMER_CALENDAR_DISPATCH_INTERVAL_SECONDS="2",
        TIMER_CALENDAR_DISPATCH_MAX_DURATION_SECONDS="1",
        TIMER_AUTOMATION_SCHEDULER_INTERVAL_SECONDS="2",
        TIMER_AUTOMATION_SCHEDULER_MAX_DURATION_SECONDS="1",
        TIMER_DOCUMENT_EXPIRY_ENABLED="false",
        # A SIGKILLed or stopped member's partitions move after 10 s instead of 60 s.
        BROKER_SESSION_TIMEOUT="10",
        BROKER_HEARTBEAT_INTERVAL="1",
        DB_LOCK_TIMEOUT_SECONDS="5",
        DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS="30",
        OUTBOX_PUBLISH_TIMEOUT_SECONDS="15",
    )
    cli_env = {**env, "WORKER_DATA_DIR": str(tmp_path / "cli"), "WEB_PORT": "1"}
    rc, out = await cli(env, "migrate")
    assert rc == 0, out
    rc, out = await cli(env, "topics")
    assert rc == 0, out
    workers = [WorkerProcess(env, tmp_path, f"matrix-{i}") for i in range(WORKERS)]
    extra = WorkerProcess(env, tmp_path, "matrix-extra")
    everyone = [*workers, extra]
    calendar = CalendarLoad(seed=SEED, rate=RATE, reverts=0.12)
    today = datetime.now(UTC).date()
    expiry = ExpiryLoad(seed=SEED, first_day=today - timedelta(days=12), owners=DOC_OWNERS)
    load_start = datetime.now(UTC) + timedelta(seconds=120)  # corrected once workers are up
    tl = Timeline()
    runs: list[DayRun] = []
    sender = AckedSender(stack.bootstrap, prefix)
    expiry_sender = AckedSender(stack.bootstrap, prefix)
    tasks: list[asyncio.Task[Any]] = []
    watcher: asyncio.Task[None] | None = None
    try:
        for w in workers:
            w.start()
        await asyncio.gather(*(w.wait_ready(timeout=240) for w in workers))
        load_start = datetime.now(UTC)
        automation = AutomationLoad(
            seed=SEED,
            send_at=(
                load_start + timedelta(seconds=at(75)),
                load_start + timedelta(seconds=at(150)),
            ),
            sources=AUTOMATION_SOURCES,
        )
        for topic, key, msg in automation.setup_messages():
            await sender.send(topic, key, msg, "setup")
        await settled(
            stack.database_url,
            "SELECT (SELECT count(*) FROM automation.reminder_settings) + "
            "(SELECT count(*) FROM automation.business_units)",
            lambda n: n == len(automation.settings) + 1,
            120,
        )
        tl = Timeline()
        tasks = [
            asyncio.create_task(cache_write_kills(tl, workers[0], calendar)),
            asyncio.create_task(rebalance(tl, extra)),
            asyncio.create_task(broker_restart(tl, stack)),
            asyncio.create_task(stop_worker(tl, workers[1])),
            asyncio.create_task(stop_timer_process(tl, workers[2])),
            asyncio.create_task(postgres_restart(tl, stack)),
            asyncio.create_task(
                expiry_days(tl, expiry, expiry_sender, cli_env, stack.database_url, runs)
            ),
            asyncio.create_task(automation_sources(tl, automation, sender)),
            asyncio.create_task(
                run_load(calendar, stack.bootstrap, prefix + EVENTS_TOPIC, seconds=PRODUCE_SECONDS)
            ),
        ]
        watcher = asyncio.create_task(watch_workers(tl, workers))
        await first_failure(tasks)
        load_done = time.monotonic()
        await expiry_day(
            tl, expiry, expiry_sender, cli_env, stack.database_url, runs, expiry.days - 1, None
        )
        expectation = expected_reminders(calendar.acked)
        last_due = max(expectation.last_due(), *automation.send_at)
        wait = (last_due - datetime.now(UTC)).total_seconds() + GRACE_SECONDS
        if wait > 0:
            await asyncio.sleep(wait)  # the reminders come due on the wall clock
        await all_ready(workers, stack.bootstrap, env["APP_ID"], timeout=120)
        quiet = await wait_quiet(stack.database_url, expectation.final_versions, QUIESCE_TIMEOUT)
        audited_at = datetime.now(UTC)
        due_records = await read_to_end(stack.bootstrap, prefix + DUE_TOPIC)
        expiry_records = await read_to_end(stack.bootstrap, prefix + EXPIRY_TOPIC)
        dispatch_records = await read_to_end(stack.bootstrap, prefix + DISPATCH_TOPIC)
    finally:
        if watcher is not None:
            tasks.append(watcher)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(asyncio.to_thread(w.stop) for w in everyone))
        await sender.close()
        await expiry_sender.close()
    (tmp_path / "acked.jsonl").write_text(
        "".join(
            json.dumps({"kind": a.kind, "acked_at": a.acked_at.isoformat(), **a.payload}) + "\n"
            for a in [*calendar.acked, *expiry.acked, *automation.acked_sources]
        )
    )
    faults = tl.windows
    # Calendar: a reminder identity, exposed from its event's first input to its DueAt.
    cal = audit_effects(calendar_effects(due_records), expectation.expected, expectation.forbidden)
    cal_detail = audit(due_records, expectation.expected, expectation.forbidden)
    inputs = input_spans(calendar.acked, "EventId")
    cal_spans = {
        i: [inputs[i.event_id], (i.due_at, i.due_at)]
        for i in [*expectation.expected, *expectation.forbidden]
    }
    # Document expiry: (DocumentId, threshold), exposed during its day's run(s).
    run_days = [r.day for r in sorted(runs, key=lambda r: r.day)]
    exp_want = expiry.expected(run_days)
    exp = audit_effects(expiry_effects(expiry_records), exp_want, {})
    run_of = {r.day: r for r in runs}
    exp_spans = {
        key: [(run_of[day].began or audited_at, run_of[day].ended or audited_at)]
        for key, day in exp_want.items()
    }
    # Automation: a SchedulerKey, exposed from its source's first input to its ScheduledOn.
    auto_want, auto_forbidden, auto_not_due = automation.expected(audited_at)
    auto = audit_effects(dispatch_effects(dispatch_records), auto_want, auto_forbidden)
    sources = input_spans(automation.acked_sources, "SourceGuid")
    auto_spans = {
        key: [sources.get(key.split(":")[3], (on, on)), (on, on)] for key, on in auto_want.items()
    }
    rows = [
        *matrix_rows("calendar", cal, cal_spans, faults, SLACK),
        *matrix_rows("document-expiry", exp, exp_spans, faults, timedelta(0)),
        *matrix_rows("automation", auto, auto_spans, faults, SLACK),
    ]
    produced = ", ".join(f"{k} {n}" for k, n in sorted(calendar.stats.by_kind.items()))
    summary: list[tuple[str, object]] = [
        ("seed", SEED),
        ("PostgreSQL", "fsync, synchronous_commit, full_page_writes on"),
        ("wall time (s)", f"{time.monotonic() - began:.0f} (load {load_done - tl.started:.0f})"),
        *((f"fault: {k}", n) for k, n in sorted(tl.counts().items())),
        ("unexpected worker exits", len(tl.unexpected_exits)),
        ("calendar messages (acked)", f"{calendar.stats.acked} ({produced})"),
        ("calendar changes skipped (margin)", calendar.stats.skipped_changes),
        ("document messages (acked)", f"{len(expiry.acked)} {dict(expiry.by_kind())}"),
        ("document runs (attempt, rc)", "; ".join(f"day {r.day}: {r.attempts}" for r in runs)),
        ("automation sources (acked)", len(automation.acked_sources)),
        ("automation rows not due by the audit", auto_not_due),
        ("automation changes skipped (margin)", automation.skipped_changes),
        (
            "re-published (same outbox-id)",
            f"calendar {cal.republished}, expiry {exp.republished}, automation {auto.republished}",
        ),
        ("calendar per-key order violations", cal_detail.out_of_order_keys),
        (
            "calendar lateness p50 / p99 / max (s)",
            f"{cal_detail.percentile(0.5):.2f} / {cal_detail.percentile(0.99):.2f} / "
            f"{cal_detail.max_lateness:.2f}",
        ),
        ("PostgreSQL at the end", quiet),
    ]
    print("\nfault matrix\n" + format_table(summary))
    print("\n" + format_matrix(rows))
    print("\nfaults:\n  " + "\n  ".join(tl.log))
    findings = log_findings(everyone)
    if findings:
        print("worker log findings:\n  " + "\n  ".join(findings))
    for exit_ in tl.unexpected_exits:
        print(f"unexpected exit: {exit_}")
    details = []
    for name, result in (("calendar", cal), ("document-expiry", exp), ("automation", auto)):
        details += [f"{name}: {d}" for d in result.details[:15]]
    if details:
        print("\n" + "\n".join(details))
    assert not (cal.failed or exp.failed or auto.failed), "\n".join(details)
    unfinished = [r for r in runs if not r.attempts or r.attempts[-1][1] != 0]
    assert not unfinished, f"document-expiry days whose last run failed: {unfinished}"
    assert tl.counts()["broker SIGKILL + start"] == 1
    assert tl.counts()["PostgreSQL immediate restart"] == 1
    assert tl.counts()["SIGKILL between commit and cache write"] == CACHE_KILLS
