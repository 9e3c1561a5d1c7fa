"""The ledger transaction of document expiry owners: a chunk of owners' markers
(insert-wins) and their DocumentExpiryReminderEvents in the outbox, one transaction per
chunk, and the halving that isolates an owner whose rows fail so every other owner of the
group commits in the same run.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

from db import document_expiry_reminders as marks_repo
from db.connector import Connection, is_transient, transaction
from streams import faults, tracing
from streams.domain.profile import scan_window, utc_date
from streams.slices.profile.owner_plan import OwnerPlan
from streams.slices.profile.reminders import check_events, event_headers, events_out
from streams.slices.profile.work import OwnerWork

NIL = UUID(int=0)

# Transient SQLSTATEs that one owner's rows can cause while the database is well: a
# serialization failure, a deadlock, a lock wait past lock_timeout (a marker held by another
# session). A group failing with one of these is split like one failing on bad data, so the
# other owners commit in the same run; the owner left alone is failed, counted, and taken by
# the next cycle. Anything else transient (connection lost, disk full, shutdown) is the
# database being unwell for every owner: the batch raises (or fails whole, inline).
OWNER_SCOPED_STATES = frozenset({"40001", "40P01", "55P03"})


def owner_scoped(exc: BaseException) -> bool:
    """A transient error that one owner's rows can cause (``OWNER_SCOPED_STATES``)."""
    return getattr(exc, "sqlstate", None) in OWNER_SCOPED_STATES


class OwnerLedger:
    """Commits owners' plans through the ledger, ``chunk`` documents per transaction;
    ``owner_failed`` is told of each owner left alone in a failing chunk; ``log_items`` says
    whether the owners' log lines want the identifiers of the documents they sent."""

    def __init__(
        self,
        *,
        chunk: int,
        topic_prefix: str,
        per_event: int,
        owner_failed: Callable[[OwnerWork, BaseException], None],
        log_items: Callable[[], bool] = lambda: False,
    ) -> None:
        self.chunk = chunk
        self.topic_prefix = topic_prefix
        self.per_event = per_event
        self._owner_failed = owner_failed
        self._log_items = log_items

    async def commit(
        self, pool: Any, plans: list[OwnerPlan], as_of: datetime, thresholds: tuple[int, ...]
    ) -> set[int]:
        """``plans``, in OwnerUserId order, a chunk at a time, each chunk one transaction
        (its markers and its owners' outbox rows), until every owner is claimed or left
        unfinished at a chunk's end (a large owner: continued later). If a chunk fails for
        anything but an unwell database (bad data, or a transient error one owner's rows can
        cause: ``owner_scoped``), each half of the owners it was to cover again on its own,
        down to single owners, so one bad owner is logged and skipped while the others
        commit. Returns the failed positions."""
        failed: set[int] = set()
        remaining = sorted(plans, key=lambda p: p.work.owner_user_id)
        while remaining:
            try:
                async with transaction(pool) as conn:
                    covered = await self.claim(conn, remaining, as_of, thresholds)
            except Exception as exc:
                if is_transient(exc) and not owner_scoped(exc):
                    raise
                if len(remaining) == 1:
                    self._owner_failed(remaining[0].work, exc)
                    return failed | {remaining[0].position}
                half = len(remaining) // 2
                failed |= await self.commit(pool, remaining[:half], as_of, thresholds)
                return failed | await self.commit(pool, remaining[half:], as_of, thresholds)
            faults.hit("expiry_owners.after_chunk")
            remaining = remaining[covered:]
        return failed

    async def claim(
        self,
        conn: Connection,
        plans: list[OwnerPlan],
        as_of: datetime,
        thresholds: tuple[int, ...],
    ) -> int:
        """One chunk of ``plans`` on ``conn``'s transaction (the seed's steps 3-6): markers and
        outbox rows of at most ``self.chunk`` documents, from the first plan's first document
        (or its continuation's cursor) on, in one statement. Returns how many plans the chunk
        covered: the last of them is left unfinished (``resume_after``) when the chunk was
        full.

        t* is decided by the insert: the smallest threshold this transaction newly marked.
        Alone that is min(crossed - marked) exactly; next to a parallel instance it never
        loses a reminder to a marker the SKIP LOCKED read passed over.

        With tracing on, each owner's ``document_expiry.owner`` span is started before the
        statement (its events' traceparent names it) and ended after it, with the number of
        documents its events list."""
        today = utc_date(as_of)
        window = scan_window(today, thresholds)
        by_owner: dict[UUID, OwnerPlan] = {}
        for plan in plans:
            plan.documents, plan.won, plan.marks, plan.logged, plan.skipped = 0, [], "", None, 0
            plan.resume_after, plan.notified_here = None, False
            by_owner[plan.work.owner_user_id] = plan
        spans = (
            {
                owner: tracing.start(
                    "document_expiry.owner",
                    ownerUserId=owner,
                    run_id=plan.work.run_id,
                    correlationId=plan.work.run_id,
                )
                for owner, plan in by_owner.items()
            }
            if tracing.enabled()
            else {}
        )
        out = events_out(
            as_of,
            self.topic_prefix,
            self.per_event,
            {
                owner: event_headers(plan.work, tracing.headers_of(spans.get(owner)))
                for owner, plan in by_owner.items()
            },
        )
        head = plans[0].work
        try:
            rows = await marks_repo.claim(
                conn,
                list(by_owner),
                window.lo,
                window.hi,
                today,
                thresholds,
                as_of,
                (head.owner_user_id, head.after or NIL),
                self.chunk,
                out,
                self._log_items(),
            )
            check_events(rows)
        except BaseException as exc:
            for span in spans.values():
                tracing.fail(span, exc)
                tracing.end(span)
            raise
        for row in rows:
            plan = by_owner[row.owner_user_id]
            plan.documents, plan.skipped, plan.won = row.documents, row.skipped, row.won
            plan.marks, plan.logged, plan.notified_here = row.marks, row.logged, bool(row.won)
        covered = len(plans)
        if rows and sum(row.documents for row in rows) >= self.chunk:
            # Owners come in OwnerUserId order: the last one may have more documents.
            last = by_owner[rows[-1].owner_user_id]
            last.resume_after = rows[-1].last_document
            covered = plans.index(last) + 1
        for owner, span in spans.items():
            tracing.end(span, documents=len(by_owner[owner].won))
        return covered
