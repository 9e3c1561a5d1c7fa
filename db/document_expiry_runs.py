"""Repository of ``profile.document_expiry_runs``: one function per statement in
``db/queries/document_expiry_runs.sql`` (one row per run)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from db.connector import Executor
from db.queries import sql


async def start(
    db: Executor,
    run_id: str,
    slot: datetime,
    as_of_date: date,
    thresholds: Sequence[int],
    started_at: datetime,
) -> None:
    await db.execute(
        sql("document_expiry_runs_start"), run_id, slot, as_of_date, list(thresholds), started_at
    )


async def total_set(db: Executor, run_id: str, owners_total: int) -> None:
    await db.execute(sql("document_expiry_runs_total_set"), run_id, owners_total)


@dataclass(frozen=True, slots=True)
class RunProgress:
    """What per-owner workers did for one run with one work item in one batch."""

    run_id: str
    item: str | None = None
    """The work item's identity, counted once per run (None: owners handed over inline)."""
    done: int = 0
    failed: int = 0
    notified: int = 0
    sent: int = 0
    skipped: int = 0


async def progress(db: Executor, progress: Sequence[RunProgress]) -> None:
    """Adds each item's counts to its run, unless the run counted that item before."""
    if not progress:
        return
    ordered = sorted(progress, key=lambda p: (p.run_id, p.item or ""))  # one lock order
    await db.execute(
        sql("document_expiry_runs_progress"),
        [p.run_id for p in ordered],
        [p.item for p in ordered],
        [p.done for p in ordered],
        [p.failed for p in ordered],
        [p.notified for p in ordered],
        [p.sent for p in ordered],
        [p.skipped for p in ordered],
    )


async def items_counted(db: Executor, items: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which (run id, item) of ``items`` their runs have counted already."""
    if not items:
        return set()
    rows = await db.fetch(
        sql("document_expiry_runs_items_counted"),
        [run_id for run_id, _ in items],
        [item for _, item in items],
    )
    return {(r["run_id"], r["item"]) for r in rows}


@dataclass(frozen=True, slots=True)
class RunRow:
    run_id: str
    slot: datetime
    as_of_date: date
    thresholds: tuple[int, ...]
    started_at: datetime
    owners_total: int | None
    owners_done: int
    owners_failed: int
    owners_notified: int
    reminders_sent: int
    skipped_already_marked: int
    pruned: int | None
    backlog: int | None
    finished_at: datetime | None
    duration_ms: float | None


async def get(db: Executor, run_id: str) -> RunRow | None:
    r = await db.fetchrow(sql("document_expiry_runs_get"), run_id)
    if r is None:
        return None
    return RunRow(**{**dict(r), "thresholds": tuple(r["thresholds"])})


async def finish(
    db: Executor,
    run_id: str,
    pruned: int,
    backlog: int | None,
    finished_at: datetime,
    duration_ms: float,
) -> None:
    await db.execute(
        sql("document_expiry_runs_finish"), run_id, pruned, backlog, finished_at, duration_ms
    )


async def prune(db: Executor, before: datetime) -> int:
    status = await db.execute(sql("document_expiry_runs_prune"), before)
    return int(status.split()[-1])


# The operators' console (streams/console): runs newest first, before a keyset bound
# (started_at, run_id), from ``since`` on, in one console state.


async def console_page(
    db: Executor, state: str, bound: tuple[datetime, str], since: datetime, limit: int
) -> list[dict[str, Any]]:
    rows = await db.fetch(sql("document_expiry_runs_console_page"), *bound, since, limit, state)
    return [{**dict(r), "thresholds": list(r["thresholds"])} for r in rows]


async def console_counts(db: Executor) -> dict[str, int]:
    """Runs by console state (Unfinished, WithFailures, Finished)."""
    rows = await db.fetch(sql("document_expiry_runs_console_counts"))
    return {str(r["state"]): int(r["n"]) for r in rows}
