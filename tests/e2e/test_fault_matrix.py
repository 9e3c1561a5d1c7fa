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
import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from devkit.loads.calendar_load import CalendarLoad, expected_reminders, run_load
from devkit.loads.expiry_days import DayRun, expiry_day, expiry_days
from devkit.loads.fault_timeline import (
    AUTOMATION_SOURCES,
    CACHE_KILLS,
    DOC_OWNERS,
    EVENTS_TOPIC,
    GRACE_SECONDS,
    PRODUCE_SECONDS,
    QUIESCE_TIMEOUT,
    RATE,
    SEED,
    SLACK,
    WORKERS,
    Timeline,
    at,
    automation_sources,
    broker_restart,
    cache_write_kills,
    cli,
    postgres_restart,
    rebalance,
    stop_timer_process,
    stop_worker,
    watch_workers,
)
from devkit.loads.matrix_end import (
    all_ready,
    first_failure,
    input_spans,
    log_findings,
    settled,
    wait_quiet,
)
from devkit.loads.reminder_audit import (
    DISPATCH_TOPIC,
    DUE_TOPIC,
    EXPIRY_TOPIC,
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
from devkit.loads.slice_loads import AckedSender, AutomationLoad, ExpiryLoad, one_utc_day
from devkit.stacks.private_stack import PrivateStack
from devkit.workers import WorkerProcess, worker_env

pytestmark = [pytest.mark.e2e, pytest.mark.faults]


@pytest.fixture
def durable_stack() -> Iterator[PrivateStack]:
    stack = PrivateStack(durable=True)
    try:
        stack.up()
        yield stack
    finally:
        stack.down()


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
            # Both on one UTC day: a run that starts just before midnight sends after it.
            send_at=one_utc_day(
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
    early = {r.day: r.unmarked[:5] for r in runs if r.unmarked}
    assert not early, f"document-expiry days done with reminders not marked: {early}"
    assert tl.counts()["broker SIGKILL + start"] == 1
    assert tl.counts()["PostgreSQL immediate restart"] == 1
    assert tl.counts()["SIGKILL between commit and cache write"] == CACHE_KILLS
