"""Profile repository: one function per statement in ``db/queries/profile.sql``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import TypeAlias
from uuid import UUID

import asyncpg

from db.queries import sql
from db.versioned import Advanced
from streams.contracts.profile import PersonDocumentChanged

# Statements outside a transaction run on the pool; inside one, on its connection.
Executor: TypeAlias = asyncpg.Connection | asyncpg.Pool


async def documents_upsert(
    conn: asyncpg.Connection,
    documents: Sequence[PersonDocumentChanged],
    fingerprints: Sequence[str],
    now: datetime,
) -> set[UUID]:
    """Store newer document states, each with its fingerprint (one per document in
    ``fingerprints``); returns the ids whose state was applied."""
    if not documents:
        return set()
    rows = await conn.fetch(
        sql("profile_documents_upsert"),
        [d.document_id for d in documents],
        [d.owner_user_id for d in documents],
        [d.person_id for d in documents],
        [d.type for d in documents],
        [d.number_mask for d in documents],
        [d.expires_at for d in documents],
        [d.status.value for d in documents],
        [d.is_deleted for d in documents],
        [d.version for d in documents],
        [d.occurred_at for d in documents],
        now,
        list(fingerprints),
    )
    return {r["document_id"] for r in rows}


async def documents_version_advance(
    conn: asyncpg.Connection,
    documents: Sequence[PersonDocumentChanged],
    fingerprints: Sequence[str],
    now: datetime,
) -> Advanced:
    """Move Version/OccurredAt forward where the stored fingerprint equals the state's (one
    per document in ``fingerprints``); say which are stale. The rest need documents_upsert."""
    if not documents:
        return Advanced()
    rows = await conn.fetch(
        sql("profile_documents_version_advance"),
        [d.document_id for d in documents],
        [d.version for d in documents],
        [d.occurred_at for d in documents],
        list(fingerprints),
        now,
    )
    return Advanced.from_rows(rows, "document_id")


@dataclass(frozen=True, slots=True)
class ScanBatch:
    """One batch of the run's scan: its size, the keyset of its last document (None when
    empty) and its documents' owners in the order of their first document."""

    documents: int
    last: tuple[date, UUID] | None
    owners: tuple[UUID, ...]


async def documents_scan(
    db: Executor, lo: date, hi: date, after: tuple[date, UUID], limit: int
) -> ScanBatch:
    r = await db.fetchrow(sql("profile_documents_scan"), lo, hi, after[0], after[1], limit)
    count, last_expires, last_document, owners = r
    last = (last_expires, last_document) if count else None
    return ScanBatch(int(count), last, tuple(owners))


@dataclass(frozen=True, slots=True)
class CheckedDocument:
    """A document of an owner whose marks are checked: DaysLeft and how many of its crossed
    thresholds have no marker."""

    document_id: UUID
    owner_user_id: UUID
    days_left: int
    unmarked: int


async def expiry_marks_check(
    db: Executor,
    owners: Mapping[UUID, int],
    lo: date,
    hi: date,
    today: date,
    thresholds: Sequence[int],
) -> list[CheckedDocument]:
    """``owners``: owner -> the most documents to read of it (one statement, bounded)."""
    if not owners:
        return []
    rows = await db.fetch(
        sql("profile_expiry_marks_check"),
        list(owners),
        lo,
        hi,
        today,
        list(thresholds),
        list(owners.values()),
    )
    return [CheckedDocument(*r) for r in rows]  # columns in the dataclass's order


@dataclass(frozen=True, slots=True)
class ClaimedDocument:
    """One document of an owner's claim: its open columns, DaysLeft, the threshold the claim
    won for it (t*, None when it inserted no marker) and how many crossed thresholds were
    already marked."""

    document_id: UUID
    owner_user_id: UUID
    type: str
    number_mask: str | None
    expires_at: date
    days_left: int
    t_star: int | None
    skipped: int


async def expiry_marks_claim(
    conn: asyncpg.Connection,
    owners: Sequence[UUID],
    lo: date,
    hi: date,
    today: date,
    thresholds: Sequence[int],
    reminded_at: datetime,
    after: tuple[UUID, UUID],
    limit: int,
) -> list[ClaimedDocument]:
    """Insert-wins for up to ``limit`` of the owners' documents in [lo, hi] after the keyset
    ``after`` (OwnerUserId, DocumentId), on the caller's transaction; one row per document."""
    if not owners:
        return []
    rows = await conn.fetch(
        sql("profile_expiry_marks_claim"),
        list(owners),
        lo,
        hi,
        today,
        list(thresholds),
        reminded_at,
        after[0],
        after[1],
        limit,
    )
    return [ClaimedDocument(*r) for r in rows]  # columns in the dataclass's order


async def expiry_marks_prune(db: Executor, before: date, limit: int) -> int:
    return int(await db.fetchval(sql("profile_expiry_marks_prune"), before, limit))


async def expiry_backlog_count(
    db: Executor, lo: date, hi: date, today: date, thresholds: Sequence[int]
) -> int:
    return int(
        await db.fetchval(sql("profile_expiry_backlog_count"), lo, hi, today, list(thresholds))
    )


async def expiry_runs_start(
    db: Executor,
    run_id: str,
    slot: datetime,
    as_of_date: date,
    thresholds: Sequence[int],
    started_at: datetime,
) -> None:
    await db.execute(
        sql("profile_expiry_runs_start"), run_id, slot, as_of_date, list(thresholds), started_at
    )


async def expiry_runs_total_set(db: Executor, run_id: str, owners_total: int) -> None:
    await db.execute(sql("profile_expiry_runs_total_set"), run_id, owners_total)


@dataclass(frozen=True, slots=True)
class RunProgress:
    """What per-owner workers did for one run in one batch."""

    run_id: str
    done: int = 0
    failed: int = 0
    notified: int = 0
    sent: int = 0
    skipped: int = 0


async def expiry_runs_progress(db: Executor, progress: Sequence[RunProgress]) -> None:
    if not progress:
        return
    await db.execute(
        sql("profile_expiry_runs_progress"),
        [p.run_id for p in progress],
        [p.done for p in progress],
        [p.failed for p in progress],
        [p.notified for p in progress],
        [p.sent for p in progress],
        [p.skipped for p in progress],
    )


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


async def expiry_runs_get(db: Executor, run_id: str) -> RunRow | None:
    r = await db.fetchrow(sql("profile_expiry_runs_get"), run_id)
    if r is None:
        return None
    return RunRow(**{**dict(r), "thresholds": tuple(r["thresholds"])})


async def expiry_runs_finish(
    db: Executor,
    run_id: str,
    pruned: int,
    backlog: int | None,
    finished_at: datetime,
    duration_ms: float,
) -> None:
    await db.execute(
        sql("profile_expiry_runs_finish"), run_id, pruned, backlog, finished_at, duration_ms
    )


async def expiry_runs_prune(db: Executor, before: datetime) -> int:
    status = await db.execute(sql("profile_expiry_runs_prune"), before)
    return int(status.split()[-1])


async def documents_owners_count(db: Executor, owners: Sequence[UUID]) -> int:
    return int(await db.fetchval(sql("profile_documents_owners_count"), list(owners)))


async def expiry_marks_owners_count(db: Executor, owners: Sequence[UUID]) -> int:
    return int(await db.fetchval(sql("profile_expiry_marks_owners_count"), list(owners)))
