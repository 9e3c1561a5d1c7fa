"""Repository of ``profile.document_expiry_reminders``: one function per statement in
``db/queries/document_expiry_reminders.sql`` (the expiry
reminder ledger; pruning raises ``profile.document_expiry_prune_horizon``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, NamedTuple
from uuid import UUID

from db.connector import Connection, Executor
from db.queries import sql


@dataclass(frozen=True, slots=True)
class CheckedDocument:
    """A document of an owner whose marks are checked: DaysLeft and how many of its crossed
    thresholds have no marker."""

    document_id: UUID
    owner_user_id: UUID
    days_left: int
    unmarked: int


async def check(
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
        sql("document_expiry_reminders_check"),
        list(owners),
        lo,
        hi,
        today,
        list(thresholds),
        list(owners.values()),
    )
    return [CheckedDocument(*r) for r in rows]  # columns in the dataclass's order


class ClaimedOwner(NamedTuple):
    """One owner of a claim, as the statement sums it up (one row per owner, not per
    document: a run claims every document of the window, and a million rows cost the worker
    more to decode than the statement costs PostgreSQL to aggregate):

    - ``documents``: its documents the claim covered; ``skipped``: their crossed thresholds
      already marked;
    - ``won``: t* of each document whose reminder this claim won (the documents its events
      list), in the events' (ExpiresAt, DocumentId) order;
    - ``marks``: the owner cache's value for these documents once every crossed threshold is
      marked (``document=t,t;document=t``, streams/domain/profile.py ``encode_marks``);
    - ``logged``: with ``log_items``, the won documents as JSON ``[[DocumentId, Type, t*,
      DaysLeft], ...]`` (None otherwise, or when it won none);
    - ``broken_document``, ``breaks``: the first won document whose item breaks the
      contract's length rules, and which field (None: none);
    - ``largest_event``: the claim's largest event in bytes; ``last_document``: the last
      document it covered in (OwnerUserId, DocumentId) order (the keyset cursor of a full
      chunk). Both are the whole statement's, the same on every row."""

    owner_user_id: UUID
    documents: int
    skipped: int
    won: list[int]
    marks: str
    logged: str | None
    broken_document: UUID | None
    breaks: str | None
    largest_event: int | None
    last_document: UUID


_CLAIMED = list(ClaimedOwner._fields)


@dataclass(frozen=True, slots=True)
class EventsOut:
    """How the claim writes its owners' events to the outbox: the topic, RemindedAt as JSON
    text, at most ``per_event`` documents per event, the headers of each owner (JSON text,
    by OwnerUserId), and the contract's length rules for an item (Type's least and most
    characters, NumberMask's most)."""

    topic: str
    reminded_at_json: str
    per_event: int
    headers: Mapping[UUID, str]
    item_limits: tuple[int, int, int]


async def claim(
    conn: Connection,
    owners: Sequence[UUID],
    lo: date,
    hi: date,
    today: date,
    thresholds: Sequence[int],
    reminded_at: datetime,
    after: tuple[UUID, UUID],
    limit: int,
    out: EventsOut,
    log_items: bool = False,
) -> list[ClaimedOwner]:
    """Insert-wins for up to ``limit`` of the owners' documents in [lo, hi] after the keyset
    ``after`` (OwnerUserId, DocumentId), and the events of what it won written to the outbox
    as ``out`` says, on the caller's transaction; one row per owner it covered, in
    OwnerUserId order (``log_items``: with the won documents' identifiers for a log line)."""
    if not owners:
        return []
    rows = await conn.fetch(
        sql("document_expiry_reminders_claim"),
        list(owners),
        lo,
        hi,
        today,
        list(thresholds),
        reminded_at,
        after[0],
        after[1],
        limit,
        out.topic,
        out.reminded_at_json,
        out.per_event,
        [out.headers[o] for o in owners],
        list(out.item_limits),
        log_items,
    )
    if rows and list(rows[0].keys()) != _CLAIMED:
        raise RuntimeError("document_expiry_reminders_claim: columns out of ClaimedOwner's order")
    make = ClaimedOwner._make
    return [make(r) for r in rows]


async def prune(db: Executor, before: date, limit: int) -> int:
    return int(await db.fetchval(sql("document_expiry_reminders_prune"), before, limit))


async def backlog_count(
    db: Executor,
    lo: date,
    hi: date,
    today: date,
    thresholds: Sequence[int],
    horizon: str | None = None,
) -> int:
    """Documents of the window that still owe a reminder; with ``horizon`` (taken by
    ``person_documents.write_horizon`` before a clean run's scan) only those written since are
    checked."""
    return int(
        await db.fetchval(
            sql("document_expiry_reminders_backlog_count"),
            lo,
            hi,
            today,
            list(thresholds),
            horizon,
        )
    )


async def owners_count(db: Executor, owners: Sequence[UUID]) -> int:
    return int(await db.fetchval(sql("document_expiry_reminders_owners_count"), list(owners)))


# The operators' console (streams/console): markers after a keyset bound (reminded_at, id),
# before ``before``.


async def console_page(
    db: Executor, bound: tuple[datetime, UUID], before: datetime, limit: int
) -> list[dict[str, Any]]:
    rows = await db.fetch(sql("document_expiry_reminders_console_page"), *bound, before, limit)
    return [dict(r) for r in rows]


async def console_of_owner(
    db: Executor, owner: UUID, bound: tuple[datetime, UUID], before: datetime, limit: int
) -> list[dict[str, Any]]:
    rows = await db.fetch(
        sql("document_expiry_reminders_console_of_owner"), *bound, before, limit, owner
    )
    return [dict(r) for r in rows]


async def console_get(db: Executor, marker_id: UUID) -> dict[str, Any] | None:
    row = await db.fetchrow(sql("document_expiry_reminders_console_get"), marker_id)
    return dict(row) if row is not None else None


async def console_count(db: Executor, cap: int) -> int:
    """Markers, counted up to ``cap``."""
    return int(await db.fetchval(sql("document_expiry_reminders_console_count"), cap))
