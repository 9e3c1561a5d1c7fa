"""The per-owner half of a document expiry run: an owner's markers (insert-wins) and its one
DocumentExpiryReminderEvent in one transaction, with the owner's known marks cached.

The cache (a changelog table keyed by OwnerUserId: document → marked thresholds) only saves
work, the ledger decides. An owner whose every crossed threshold the cache claims is settled
without a transaction, but only after one statement per batch has counted those claims in
the ledger; if the count falls short the cache lied (or is out of date after a prune or a
manual delete) and those owners go to the ledger like any cache miss. So an empty, stale or
lost cache costs round trips, and a cache that claims a mark the ledger lacks costs one more
statement: neither changes which reminders are sent.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any
from uuid import UUID

from db import profile as repo
from db.connector import Connection, is_transient, transaction
from db.profile import NewMark, OwnedDocument, RunProgress
from streams.agents.consumer import Decoded
from streams.contracts import DOCUMENT_EXPIRY_REMINDERS
from streams.contracts.profile import DocumentExpiryReminderEvent, ExpiringDocumentItem
from streams.domain.profile import (
    claims_to_verify,
    crossed,
    days_left,
    decide,
    decode_marks,
    encode_marks,
    scan_window,
    settled_by,
    utc_date,
)
from streams.outbox.records import OutboxRecord, insert_many, record_for
from streams.runtime import Runtime
from streams.slices.profile.metrics import DocumentExpiryMetrics
from streams.slices.profile.work import OwnerWork
from streams.tables.cache import KeyCache

log = logging.getLogger("streams.slices.profile.owners")

AGGREGATE_TYPE = "Profile"


@dataclass
class OwnerPlan:
    """One owner of a batch: its work item, its documents in the window, what they crossed."""

    position: int
    event: Any
    work: OwnerWork
    docs: list[OwnedDocument]
    crossed: dict[str, frozenset[int]]
    """Document id (text, as in the cache) → crossed thresholds, in the order of ``docs``."""
    cached: Any = None
    """The cache's value for the owner as read (written back only when it changes)."""
    claimed: dict[str, frozenset[int]] = field(default_factory=dict)
    known: dict[str, set[int]] = field(default_factory=dict)
    """Marks the ledger has for the owner's documents once its transaction committed."""
    items: list[ExpiringDocumentItem] = field(default_factory=list)
    """What the owner's event lists (one per document whose t* this transaction won)."""
    skipped: int = 0


@dataclass
class OwnerBatchResult:
    """What one batch of work items did (the consumer reads ``applied_positions``)."""

    owners: int = 0
    settled_by_cache: int = 0
    ledger: int = 0
    failed: int = 0
    notified: int = 0
    sent: int = 0
    skipped: int = 0
    disagreements: int = 0
    applied_positions: set[int] = field(default_factory=set)
    by_threshold: Counter[int] = field(default_factory=Counter)


class OwnerWorker:
    """``apply`` for the work-item agent, and ``process_inline`` for an inline run."""

    def __init__(
        self,
        runtime: Runtime,
        metrics: DocumentExpiryMetrics,
        cache: KeyCache | None = None,
    ) -> None:
        self.runtime = runtime
        self.metrics = metrics
        self.cache = cache
        self.topic_prefix = runtime.settings.topic_prefix
        self.totals = OwnerBatchResult()

    async def __call__(self, batch: Sequence[Decoded[OwnerWork]]) -> OwnerBatchResult:
        return await self.process([(d.event, d.message) for d in batch])

    async def process_inline(self, works: Sequence[OwnerWork]) -> OwnerBatchResult:
        """As ``process``; a database that is unwell fails these owners (logged, counted:
        the next run picks them up) instead of raising, as the seed's loop continues."""
        try:
            return await self.process([(None, w) for w in works])
        except Exception as exc:
            if not is_transient(exc):
                raise
            result = OwnerBatchResult(owners=len(works))
            for work in works:
                self._owner_failed(work, exc)
            plans = [OwnerPlan(i, None, w, [], {}) for i, w in enumerate(works)]
            await self._progress(plans, {p.position for p in plans}, result)
            self._add_totals(result)
            return result

    async def process(self, items: Sequence[tuple[Any, OwnerWork]]) -> OwnerBatchResult:
        """Every owner of the batch; raises only when PostgreSQL is unwell (the caller retries:
        owners already committed are then settled by the ledger)."""
        result = OwnerBatchResult()
        # A redelivered item within one batch is the same owner's same work: keep the last.
        latest: dict[tuple[str, UUID], tuple[int, Any, OwnerWork]] = {}
        for i, (event, work) in enumerate(items):
            latest[(work.run_id, work.owner_user_id)] = (i, event, work)
        groups: dict[tuple[datetime, tuple[int, ...]], list[tuple[int, Any, OwnerWork]]]
        groups = defaultdict(list)
        for i, event, work in latest.values():
            groups[(work.as_of, tuple(work.thresholds_days))].append((i, event, work))
        plans: list[OwnerPlan] = []
        failed: set[int] = set()
        for (as_of, thresholds), group in groups.items():
            group_plans = await self._plan(group, utc_date(as_of), thresholds)
            plans.extend(group_plans)
            failed |= await self._settle(group_plans, as_of, thresholds, result)
        await self._progress(plans, failed, result)
        for threshold, n in result.by_threshold.items():
            self.metrics.reminders.labels(str(threshold)).inc(n)
        self._add_totals(result)
        return result

    async def _plan(
        self, group: list[tuple[int, Any, OwnerWork]], today: date, thresholds: tuple[int, ...]
    ) -> list[OwnerPlan]:
        window = scan_window(today, thresholds)
        pool = await self.runtime.pool()
        docs = await repo.documents_owned_get(
            pool, [w.owner_user_id for _, _, w in group], window.lo, window.hi
        )
        by_owner: dict[UUID, list[OwnedDocument]] = defaultdict(list)
        for doc in docs:
            by_owner[doc.owner_user_id].append(doc)
        plans = []
        for i, event, work in group:
            # Two runs of one slot (a rerun) can put one owner twice in a group: the same work,
            # done once (the second plan has nothing to do and is only counted as done).
            owned = by_owner.pop(work.owner_user_id, [])
            hit = {
                str(d.document_id): crossed(days_left(d.expires_at, today), thresholds)
                for d in owned
            }
            plans.append(OwnerPlan(i, event, work, owned, hit))
        return plans

    async def _settle(
        self,
        plans: list[OwnerPlan],
        as_of: datetime,
        thresholds: tuple[int, ...],
        result: OwnerBatchResult,
    ) -> set[int]:
        """Settle by the verified cache what it can, the rest through the ledger; returns the
        positions of owners that failed."""
        result.owners += len(plans)
        candidates: list[OwnerPlan] = []
        misses: list[OwnerPlan] = []
        for plan in plans:
            if not plan.docs:
                continue  # nothing in the window any more (archived, renewed since the scan)
            if self.cache is not None:
                plan.cached = self.cache.peek(str(plan.work.owner_user_id))
                plan.claimed = decode_marks(plan.cached)
            if plan.claimed and settled_by(plan.crossed, plan.claimed):
                candidates.append(plan)
            else:
                misses.append(plan)
        if candidates:
            claims = [pair for p in candidates for pair in claims_to_verify(p.crossed)]
            found = await repo.expiry_marks_count(await self.runtime.pool(), claims)
            if found == len(claims):
                for plan in candidates:
                    plan.skipped = sum(len(hit) for hit in plan.crossed.values())
                result.settled_by_cache += len(candidates)
            else:
                # The cache claims marks the ledger does not have: it must not decide.
                result.disagreements += 1
                self.metrics.cache_disagreements.inc()
                log.warning(
                    "action=cache_disagreed owners=%d claimed=%d found=%d",
                    len(candidates),
                    len(claims),
                    found,
                )
                misses.extend(candidates)
                candidates = []
        if self.cache is not None:
            self.cache.record(True, len(candidates))
            self.cache.record(False, len(misses))
        self.metrics.owners.labels("cache").inc(len(candidates))
        failed: set[int] = set()
        if misses:
            failed = await self._commit(misses, as_of, thresholds, result)
        for plan in misses:
            if plan.position not in failed:
                self._after_commit(plan, result)
        return failed

    async def _commit(
        self,
        plans: list[OwnerPlan],
        as_of: datetime,
        thresholds: tuple[int, ...],
        result: OwnerBatchResult,
    ) -> set[int]:
        """One transaction for the batch's owners; if it fails for anything but an unwell
        database, each owner again in a transaction of its own, so one bad owner is logged
        and skipped while the others commit (an owner is always whole or not at all)."""
        pool = await self.runtime.pool()
        try:
            async with transaction(pool) as conn:
                await self._owners_tx(conn, plans, as_of, thresholds)
            return set()
        except Exception as exc:
            if is_transient(exc):
                raise
            if len(plans) == 1:
                self._owner_failed(plans[0].work, exc)
                return {plans[0].position}
        failed: set[int] = set()
        for plan in plans:
            try:
                async with transaction(pool) as conn:
                    await self._owners_tx(conn, [plan], as_of, thresholds)
            except Exception as exc:
                if is_transient(exc):
                    raise
                self._owner_failed(plan.work, exc)
                failed.add(plan.position)
        return failed

    async def _owners_tx(
        self,
        conn: Connection,
        plans: list[OwnerPlan],
        as_of: datetime,
        thresholds: tuple[int, ...],
    ) -> None:
        """Markers + outbox rows of ``plans`` on ``conn``'s transaction (the seed's steps 3-6)."""
        today = utc_date(as_of)
        locked = await repo.expiry_marks_lock(conn, [d.document_id for p in plans for d in p.docs])
        marked: dict[UUID, set[int]] = defaultdict(set)
        for doc_id, t in locked:
            marked[doc_id].add(t)
        new: list[NewMark] = []
        for plan in plans:
            plan.skipped, plan.items, plan.known = 0, [], {}
            for d, key in zip(plan.docs, plan.crossed, strict=True):
                decision = decide(
                    d.document_id, d.expires_at, today, thresholds, marked[d.document_id]
                )
                plan.skipped += len(decision.crossed) - len(decision.to_mark)
                # Whether won here or lost to a parallel instance, these are marked after commit.
                plan.known[key] = marked[d.document_id] | set(decision.to_mark)
                new.extend(
                    NewMark(d.document_id, d.owner_user_id, d.type, t, d.expires_at)
                    for t in decision.to_mark
                )
        won = await repo.expiry_marks_insert(conn, new, as_of)
        won_by_doc: dict[UUID, set[int]] = defaultdict(set)
        for doc_id, t in won:
            won_by_doc[doc_id].add(t)
        records: list[OutboxRecord] = []
        for plan in plans:
            plan.items = [
                self._item(d, min(won_by_doc[d.document_id]), today)
                for d in plan.docs
                if d.document_id in won_by_doc
            ]
            if plan.items:
                event = DocumentExpiryReminderEvent(
                    owner_user_id=plan.work.owner_user_id, reminded_at=as_of, documents=plan.items
                )
                records.append(self._record(plan.work, event))
        await insert_many(conn, records)

    @staticmethod
    def _item(d: OwnedDocument, threshold: int, today: date) -> ExpiringDocumentItem:
        # t* is decided by the insert: the smallest threshold this transaction newly marked.
        # Alone that is min(crossed - marked) exactly; next to a parallel instance it never
        # loses a reminder to a marker the SKIP LOCKED read passed over.
        return ExpiringDocumentItem(
            document_id=d.document_id,
            type=d.type,
            number_mask=d.number_mask,
            expires_at=d.expires_at,
            threshold_days=threshold,
            days_left=days_left(d.expires_at, today),
        )

    def _record(self, work: OwnerWork, event: DocumentExpiryReminderEvent) -> OutboxRecord:
        owner = str(work.owner_user_id)
        return record_for(
            DOCUMENT_EXPIRY_REMINDERS,
            event,
            topic_prefix=self.topic_prefix,
            headers={
                "correlation-id": work.run_id,
                "work-id": work.work_id,
                "aggregate-type": AGGREGATE_TYPE,
                "aggregate-id": owner,
            },
        )

    def _after_commit(self, plan: OwnerPlan, result: OwnerBatchResult) -> None:
        """Committed: count, log, and let the cache learn what the ledger now says."""
        work = plan.work
        result.ledger += 1
        result.skipped += plan.skipped
        self.metrics.owners.labels("ledger").inc()
        for item in plan.items:
            result.by_threshold[item.threshold_days] += 1
            # Identifiers only: never NumberMask or any other document value.
            log.info(
                "action=reminder_queued run_id=%s owner_user_id=%s document_id=%s type=%s "
                "threshold_days=%d days_left=%d",
                work.run_id,
                work.owner_user_id,
                item.document_id,
                item.type,
                item.threshold_days,
                item.days_left,
            )
        if plan.items:
            result.applied_positions.add(plan.position)
            result.notified += 1
            result.sent += len(plan.items)
        if self.cache is not None and plan.event is not None:
            value = encode_marks(plan.known)
            if value != plan.cached:
                self.cache.put(plan.event, str(work.owner_user_id), value)

    def _owner_failed(self, work: OwnerWork, exc: BaseException) -> None:
        self.metrics.errors.inc()
        self.metrics.owners.labels("failed").inc()
        log.error(
            "action=owner_failed run_id=%s owner_user_id=%s work_id=%s error=%s sqlstate=%s",
            work.run_id,
            work.owner_user_id,
            work.work_id,
            type(exc).__name__,
            getattr(exc, "sqlstate", None) or "-",
        )

    async def _progress(
        self, plans: list[OwnerPlan], failed: set[int], result: OwnerBatchResult
    ) -> None:
        result.failed += len(failed)
        per_run: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for plan in plans:
            p = per_run[plan.work.run_id]
            p["done"] += 1
            if plan.position in failed:
                p["failed"] += 1
                continue
            p["notified"] += int(bool(plan.items))
            p["sent"] += len(plan.items)
            p["skipped"] += plan.skipped
        if per_run:
            await repo.expiry_runs_progress(
                await self.runtime.pool(),
                [RunProgress(run_id, **counts) for run_id, counts in per_run.items()],
            )

    def _add_totals(self, result: OwnerBatchResult) -> None:
        t = self.totals
        t.owners += result.owners
        t.settled_by_cache += result.settled_by_cache
        t.ledger += result.ledger
        t.failed += result.failed
        t.notified += result.notified
        t.sent += result.sent
        t.skipped += result.skipped
        t.disagreements += result.disagreements
