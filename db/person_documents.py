"""Repository of ``profile.person_documents``: one function per statement in
``db/queries/person_documents.sql`` (the projection and the expiry run's scan)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from uuid import UUID

from db.connector import Connection, Executor
from db.queries import sql
from db.versioned import Advanced
from streams.contracts.profile import PersonDocumentChanged


async def upsert(
    conn: Connection,
    documents: Sequence[PersonDocumentChanged],
    fingerprints: Sequence[str],
    now: datetime,
) -> set[UUID]:
    """Store newer document states, each with its fingerprint (one per document in
    ``fingerprints``); returns the ids whose state was applied."""
    if not documents:
        return set()
    rows = await conn.fetch(
        sql("person_documents_upsert"),
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


async def version_advance(
    conn: Connection,
    documents: Sequence[PersonDocumentChanged],
    fingerprints: Sequence[str],
    now: datetime,
) -> Advanced:
    """Move Version/OccurredAt forward where the stored fingerprint equals the state's (one
    per document in ``fingerprints``); say which are stale. The rest need upsert."""
    if not documents:
        return Advanced()
    rows = await conn.fetch(
        sql("person_documents_version_advance"),
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


async def scan(db: Executor, lo: date, hi: date, after: tuple[date, UUID], limit: int) -> ScanBatch:
    r = await db.fetchrow(sql("person_documents_scan"), lo, hi, after[0], after[1], limit)
    count, last_expires, last_document, owners = r
    last = (last_expires, last_document) if count else None
    return ScanBatch(int(count), last, tuple(owners))


async def write_horizon(db: Executor) -> str:
    """The oldest transaction running now, as a 32-bit transaction id in text: a document
    row written by an older one was committed before this call."""
    return str(await db.fetchval(sql("person_documents_write_horizon")))


async def owners_count(db: Executor, owners: Sequence[UUID]) -> int:
    return int(await db.fetchval(sql("person_documents_owners_count"), list(owners)))
