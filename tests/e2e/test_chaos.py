"""Chaos run: three real workers under steady calendar load while workers, the broker and
PostgreSQL are killed; the output topic must hold every due reminder exactly once.

The run has a Kafka and a PostgreSQL of its own (stack/stack.sh under a temporary
DEV_DIR, free ports): it SIGKILLs the broker and restarts PostgreSQL in immediate mode,
which the shared stack must never see. The judge is pin.calendar.reminder-due.v1 alone,
read to its end offsets, against the reminders computed from the acknowledged input
(tests/support/calendar_load.py). Knobs (environment): CHAOS_SEED, CHAOS_PRODUCE_SECONDS,
CHAOS_RATE (new events per second), CHAOS_WORKER_KILL_EVERY_SECONDS.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest

from devkit.workers import ROOT, WorkerProcess, worker_env
from tests.support.calendar_load import CalendarLoad, expected_reminders, run_load
from tests.support.private_stack import PrivateStack
from tests.support.reminder_audit import DUE_TOPIC, audit, format_table, read_to_end

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

EVENTS_TOPIC = "pin.calendar.events.v1"
SEED = int(os.environ.get("CHAOS_SEED", str(random.SystemRandom().randrange(1_000_000))))
PRODUCE_SECONDS = float(os.environ.get("CHAOS_PRODUCE_SECONDS", "120"))
RATE = float(os.environ.get("CHAOS_RATE", "4"))
KILL_EVERY = float(os.environ.get("CHAOS_WORKER_KILL_EVERY_SECONDS", "25"))
BROKER_KILL_AT = 35.0
POSTGRES_RESTART_AT = 75.0
# Worker kills go on after the load stops, while the last reminders come due.
FAULTS_UNTIL = PRODUCE_SECONDS + 45.0
GRACE_SECONDS = 20.0
QUIESCE_TIMEOUT = 90.0
WORKERS = 3
SYNCHRONOUS_COMMIT = os.environ.get("CHAOS_PG_SYNCHRONOUS_COMMIT", "on")


@pytest.fixture
def private_stack() -> Iterator[PrivateStack]:
    stack = PrivateStack()
    try:
        stack.up()
        # stack.sh runs PostgreSQL with synchronous_commit=off (fast, for development): a
        # crash then forgets transactions it had already committed and made visible, so a
        # dispatch whose outbox row was published can come back Pending and be sent again
        # under a new outbox id. A deployment commits durably; so does this run, unless
        # CHAOS_PG_SYNCHRONOUS_COMMIT=off asks to see that effect.
        stack.set_database_defaults(synchronous_commit=SYNCHRONOUS_COMMIT)
        yield stack
    finally:
        stack.down()


@dataclass
class Chaos:
    """Faults injected, and worker exits nobody asked for."""

    started: float = field(default_factory=time.monotonic)
    counts: Counter[str] = field(default_factory=Counter)
    log: list[str] = field(default_factory=list)
    unexpected_exits: list[str] = field(default_factory=list)
    killing: set[str] = field(default_factory=set)

    def note(self, kind: str, detail: str) -> None:
        self.counts[kind] += 1
        self.log.append(f"t={time.monotonic() - self.started:6.1f}s {kind} {detail}")


async def run_cli(env: dict[str, str], command: str) -> None:
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "streams", command],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"streams {command}: {proc.stdout}\n{proc.stderr}"


async def inject_faults(
    chaos: Chaos, stack: PrivateStack, workers: list[WorkerProcess], rng: random.Random
) -> None:
    """Worker SIGKILL + restart every KILL_EVERY s, one broker SIGKILL, one PG immediate restart."""
    plan: list[tuple[float, str]] = [(BROKER_KILL_AT, "broker"), (POSTGRES_RESTART_AT, "postgres")]
    t = 15.0
    while t < FAULTS_UNTIL:
        plan.append((t, "worker"))
        t += KILL_EVERY
    for at, kind in sorted(plan):
        delay = chaos.started + at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if kind == "worker":
            w = rng.choice(workers)
            chaos.killing.add(w.name)
            try:
                await asyncio.to_thread(w.kill)
                chaos.note("worker SIGKILL + restart", w.name)
                w.start()
            finally:
                chaos.killing.discard(w.name)
        elif kind == "broker":
            pid = await asyncio.to_thread(stack.kill_broker)
            chaos.note("broker SIGKILL + restart", f"pid {pid}")
            began = time.monotonic()
            await asyncio.to_thread(stack.start_broker)
            chaos.log.append(f"  broker back after {time.monotonic() - began:.1f}s")
        else:
            began = time.monotonic()
            await asyncio.to_thread(stack.restart_postgres_immediate)
            chaos.note("PostgreSQL immediate restart", f"{time.monotonic() - began:.1f}s")


async def watch_workers(chaos: Chaos, workers: list[WorkerProcess]) -> None:
    """A worker that exits by itself is a finding: note it and start it again."""
    while True:
        for w in workers:
            if w.name in chaos.killing or w.proc is None or w.proc.poll() is None:
                continue
            chaos.unexpected_exits.append(f"{w.name} rc={w.proc.returncode}: {w.tail(15)}")
            chaos.log.append(
                f"t={time.monotonic() - chaos.started:6.1f}s {w.name} exited by itself"
            )
            w.start()
        await asyncio.sleep(0.5)


async def wait_quiet(db: str, final_versions: dict[str, int], timeout: float) -> dict[str, int]:
    """Poll PostgreSQL until every produced Version is applied, nothing due is Pending and
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
                    "events_behind": sum(stored.get(k, -1) != v for k, v in final_versions.items()),
                    "due_pending": await conn.fetchval(
                        "SELECT count(*) FROM calendar.event_reminders "
                        "WHERE status = 'Pending' AND due_at < now()"
                    ),
                    "outbox_unpublished": await conn.fetchval(
                        "SELECT count(*) FROM ops.outbox WHERE published_at IS NULL"
                    ),
                    "sent_rows": await conn.fetchval(
                        "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent'"
                    ),
                }
            finally:
                await conn.close()
            if not any(figures[k] for k in ("events_behind", "due_pending", "outbox_unpublished")):
                return figures
        except (OSError, asyncpg.PostgresError) as exc:
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


@pytest.mark.timeout(600)
async def test_chaos_every_due_reminder_is_published_once_through_worker_broker_and_db_faults(
    private_stack: PrivateStack, tmp_path: Path
) -> None:
    began = time.monotonic()
    stack = private_stack
    prefix = f"chaos{uuid.uuid4().hex[:8]}."
    env = worker_env(
        stack.database_url,
        stack.bootstrap,
        prefix,
        TIMER_CALENDAR_DISPATCH_INTERVAL_SECONDS="2",
        TIMER_CALENDAR_DISPATCH_MAX_DURATION_SECONDS="1",
        # A SIGKILLed member's partitions move after 10 s instead of Faust's 60 s default.
        BROKER_SESSION_TIMEOUT="10",
        BROKER_HEARTBEAT_INTERVAL="1",
        DB_LOCK_TIMEOUT_SECONDS="5",
        DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS="30",
        OUTBOX_PUBLISH_TIMEOUT_SECONDS="15",
    )
    await run_cli(env, "migrate")
    await run_cli(env, "topics")
    workers = [WorkerProcess(env, tmp_path, f"chaos-{i}") for i in range(WORKERS)]
    rng = random.Random(SEED)
    load = CalendarLoad(seed=SEED, rate=RATE)
    chaos = Chaos()
    tasks: list[asyncio.Task[None]] = []
    try:
        for w in workers:
            w.start()
        await asyncio.gather(*(w.wait_ready(timeout=180) for w in workers))
        ready_at = time.monotonic()
        chaos = Chaos()
        tasks = [
            asyncio.create_task(inject_faults(chaos, stack, workers, rng)),
            asyncio.create_task(watch_workers(chaos, workers)),
        ]
        producing = asyncio.create_task(
            run_load(load, stack.bootstrap, prefix + EVENTS_TOPIC, seconds=PRODUCE_SECONDS)
        )
        tasks.append(producing)
        # A fault that could not be injected (or undone) ends the run at once.
        await asyncio.wait([producing, tasks[0]], return_when=asyncio.FIRST_EXCEPTION)
        for t in (producing, tasks[0]):
            if t.done() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
        await producing
        load_done = time.monotonic()
        await tasks[0]  # the fault schedule ends FAULTS_UNTIL after the start
        # The acknowledged input, for a post-mortem (expected_reminders is pure).
        (tmp_path / "acked.jsonl").write_text(
            "".join(
                json.dumps({"kind": a.kind, "acked_at": a.acked_at.isoformat(), **a.payload}) + "\n"
                for a in load.acked
            )
        )
        expectation = expected_reminders(load.acked)
        wait = (expectation.last_due() - datetime.now(UTC)).total_seconds() + GRACE_SECONDS
        if wait > 0:
            await asyncio.sleep(wait)  # the reminders come due on the wall clock
        await asyncio.gather(*(w.wait_ready(timeout=120) for w in workers))
        quiet = await wait_quiet(stack.database_url, expectation.final_versions, QUIESCE_TIMEOUT)
        records = await read_to_end(stack.bootstrap, prefix + DUE_TOPIC)
        report = audit(records, expectation.expected, expectation.forbidden)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(asyncio.to_thread(w.stop) for w in workers))
    findings = log_findings(workers)
    produced = ", ".join(f"{k} {n}" for k, n in sorted(load.stats.by_kind.items()))
    rows: list[tuple[str, object]] = [
        ("seed", SEED),
        ("PostgreSQL synchronous_commit", SYNCHRONOUS_COMMIT),
        ("wall time (s)", f"{time.monotonic() - began:.0f} (load {load_done - ready_at:.0f})"),
        *((f"fault: {k}", n) for k, n in sorted(chaos.counts.items())),
        ("unexpected worker exits", len(chaos.unexpected_exits)),
        ("messages produced (acked)", f"{load.stats.acked} ({produced})"),
        ("send attempts / errors", f"{load.stats.attempts} / {load.stats.send_errors}"),
        ("changes skipped (margin)", load.stats.skipped_changes),
        ("events", f"{len(expectation.final_versions)} ({expectation.closed_events} closed)"),
        ("reminders expected", report.expected),
        ("reminders forbidden", f"{len(expectation.forbidden)} (cancelled/superseded)"),
        ("not created (past at change)", expectation.not_created),
        ("min margin of a removal (s)", f"{expectation.min_margin_seconds:.1f}"),
        ("records on the topic", report.records),
        ("published", report.published),
        ("lost", len(report.lost)),
        ("duplicated effects", report.duplicated_effects),
        ("re-publishes (same outbox-id)", report.republishes),
        ("unexpected", f"{sum(report.unexpected.values())} {dict(report.unexpected)}"),
        ("per-key order violations", report.out_of_order_keys),
        (
            "lateness p50 / p99 / max (s)",
            f"{report.percentile(0.5):.2f} / {report.percentile(0.99):.2f} / {report.max_lateness:.2f}",
        ),
        ("PostgreSQL at the end", quiet),
    ]
    print("\nchaos run\n" + format_table(rows))
    print("faults:\n  " + "\n  ".join(chaos.log))
    if findings:
        print("worker log findings:\n  " + "\n  ".join(findings))
    for exit_ in chaos.unexpected_exits:
        print(f"unexpected exit: {exit_}")
    details = "\n".join(
        [
            *(f"lost: {i}" for i in report.lost[:20]),
            *report.duplicated[:20],
            *report.unexpected_items[:20],
        ]
    )
    assert not report.lost and report.duplicated_effects == 0, details
    assert not report.unexpected, details
    assert chaos.counts["broker SIGKILL + restart"] == 1
    assert chaos.counts["PostgreSQL immediate restart"] == 1
