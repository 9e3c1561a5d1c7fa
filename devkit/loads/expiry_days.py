"""The fault matrix's document-expiry days: one daily run per day, some broken on purpose
(a locked table, a SIGTERM) or by another fault, retried by hand for the same slot."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime

import asyncpg

from devkit.loads.fault_timeline import PG_DOWN, RUN_RETRIES, Timeline, at, cli
from devkit.loads.slice_loads import DOCUMENTS_TOPIC, AckedSender, ExpiryLoad
from devkit.wait import NotWithin, eventually
from devkit.workers import ROOT


@dataclass
class DayRun:
    day: int
    fault: str | None
    attempts: list[tuple[str, int]] = field(default_factory=list)
    began: datetime | None = None
    ended: datetime | None = None
    unmarked: list[tuple[str, int]] = field(default_factory=list)
    """(DocumentId, t*) this day must remind with no marker once its run said it was done:
    a run that reports success before its owners are done (checked before the next day's
    changes, which could otherwise reach those owners first)."""


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

    async def begun_or_ended() -> bool:
        nonlocal conn
        if proc.returncode is not None:
            return True
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
            return False
        return bool(started)

    try:
        with contextlib.suppress(NotWithin):  # not begun within 60 s: SIGTERMed all the same
            await eventually(begun_or_ended, timeout=60, what="the run begun", interval=0.05)
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
    if rc == 0:
        due = [key for key, day in load.expected(range(k + 1)).items() if day == k]
        run.unmarked = await unmarked(db, due)
        if run.unmarked:
            tl.note(f"expiry day {k}: done with {len(run.unmarked)} reminders not marked")
    if fault:
        tl.window(fault, run.began or run.ended, run.ended)


async def unmarked(db: str, keys: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Which (DocumentId, ThresholdDays) of ``keys`` have no marker in the ledger."""

    async def read() -> list[tuple[str, int]] | None:
        with contextlib.suppress(*PG_DOWN):
            conn = await asyncpg.connect(db, timeout=5)
            try:
                rows = await conn.fetch(
                    "SELECT document_id::text AS d, threshold_days AS t "
                    "FROM profile.document_expiry_reminders WHERE document_id = ANY($1::uuid[])",
                    sorted({d for d, _ in keys}),
                )
            finally:
                await conn.close()
            marked = {(r["d"], r["t"]) for r in rows}
            return [key for key in keys if key not in marked]
        return None

    found: list[tuple[str, int]] | None = await eventually(
        read, timeout=120, what="the ledger read", until=lambda v: v is not None
    )
    assert found is not None
    return found


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
