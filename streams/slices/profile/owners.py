"""The per-owner half of a document expiry run: ``OwnerWorker`` takes owners' work items
(from the work-item agent, or inline), settles by the verified cache what it can, sends the
rest through the ledger, continues a large owner chunk by chunk, and adds up the runs'
progress.

Owners are committed up to OWNERS_PER_TRANSACTION per transaction, each owner's markers
(insert-wins) and its one DocumentExpiryReminderEvent together; a group that fails for
anything but an unwell database (bad data, or a lock timeout, serialization failure or
deadlock on one owner's rows) is halved until the failing owner is alone (logged, counted,
skipped: the next cycle takes it), so every other owner commits whole in the same run
(owner_ledger.py). The cache (a changelog table keyed by OwnerUserId: document → marked
thresholds) only saves work: an owner it says is settled is settled only once one read of
the ledger finds every one of those marks; otherwise the ledger decides. It is written
after the commit (owner_cache.py). Design: docs/architecture.md.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from db import document_expiry_runs as runs_repo
from db.connector import is_transient
from db.document_expiry_runs import RunProgress
from streams import faults, logs
from streams.asynctools import in_flight
from streams.runtime import Runtime
from streams.slices.profile.metrics import DocumentExpiryMetrics
from streams.slices.profile.owner_cache import Claims, claimed_marks, committed_value, verify
from streams.slices.profile.owner_ledger import OwnerLedger
from streams.slices.profile.owner_plan import TOTALS, OwnerBatchResult, OwnerPlan
from streams.slices.profile.reminders import logged_items, queued_documents, threshold_counts
from streams.slices.profile.settings import DocumentExpirySettings
from streams.slices.profile.work import (
    Continuations,
    OwnersWork,
    OwnerWork,
    item_key,
    owner_item,
)

if TYPE_CHECKING:  # the stream side's types: the inline fan-out runs it without Faust
    from streams.input.consumer import Decoded
    from streams.tables.cache import KeyCache

log = logging.getLogger("streams.slices.profile.owners")
# The seed's per-document "reminder queued" lines: DEBUG (LOG_LEVEL=debug turns them on),
# as dispatch's per-item lines are (streams/slices/calendar/dispatch.py).
ITEM_LEVEL = logging.DEBUG

# Owners per transaction (group commit): a million documents cannot afford one each.
OWNERS_PER_TRANSACTION = 500
# A batch's progress, per run and work item (``progress_item``): the counts to add.
PerItem = dict[tuple[str, str | None], Counter[str]]

# Transactions of one batch in flight at once: while PostgreSQL runs one claim, the worker
# builds the events of another (their owners are disjoint, so they never wait on each other).
TRANSACTIONS_IN_FLIGHT = 2


class OwnerWorker:
    """``apply`` for the work-item agent, and ``process_inline`` for an inline run."""

    def __init__(
        self,
        runtime: Runtime,
        metrics: DocumentExpiryMetrics,
        cache: KeyCache | None = None,
        continuations: Continuations | None = None,
    ) -> None:
        self.runtime = runtime
        self.metrics = metrics
        self.cache = cache
        self.continuations = continuations
        self.topic_prefix = runtime.settings.topic_prefix
        settings = runtime.settings.of(DocumentExpirySettings)
        self.per_event = settings.document_expiry_max_documents_per_event
        self.chunk = settings.document_expiry_claim_chunk_documents
        self.ledger = OwnerLedger(
            chunk=self.chunk,
            topic_prefix=self.topic_prefix,
            per_event=self.per_event,
            owner_failed=self._owner_failed,
            log_items=lambda: log.isEnabledFor(logging.INFO),
        )
        self.totals = OwnerBatchResult()

    async def __call__(self, batch: Sequence[Decoded[OwnersWork]]) -> OwnerBatchResult:
        """The agent's ``apply``: the owners of every work item its run has not counted yet.

        Kafka delivers a record at least once: after a worker died between writing its
        progress and committing its offsets, to another worker; after a rewind, or a tail
        read by the consumer's gap healer, to this one. The run counts each item once
        (``runs_repo.progress``), so the owners of a record it counted already are done
        and skipped here; any other record is done again (the ledger makes that a no-op)."""
        pool = await self.runtime.pool()
        ids = [item_ids(decoded) for decoded in batch]
        counted = await runs_repo.items_counted(pool, [k for keys in ids for k in keys])
        items: list[tuple[int, Any, OwnerWork]] = []
        skipped = 0
        for i, (decoded, keys) in enumerate(zip(batch, ids, strict=True)):
            if any(k in counted for k in keys):
                skipped += 1
                continue
            items.extend((i, decoded.event, work) for work in decoded.message.works())
        if skipped:
            logs.event(log, logging.INFO, "work_replay_skipped", items=skipped)
        return await self.process(items)

    async def process_inline(self, works: Sequence[OwnerWork]) -> OwnerBatchResult:
        """As ``process``; a database that is unwell fails these owners (logged, counted:
        the next run picks them up) instead of raising, as the seed's loop continues."""
        try:
            return await self.process([(0, None, w) for w in works])
        except Exception as exc:
            if not is_transient(exc):
                raise
            result = OwnerBatchResult(owners=len(works))
            for work in works:
                self._owner_failed(work, exc)
            plans = [OwnerPlan(i, 0, None, w) for i, w in enumerate(works)]
            per_run: PerItem = defaultdict(Counter)
            self._count(plans, {p.position for p in plans}, per_run, result)
            await self._progress(per_run)
            self._add_totals(result)
            return result

    async def process(self, items: Sequence[tuple[int, Any, OwnerWork]]) -> OwnerBatchResult:
        """Every owner of the batch (``(item index, event, work)`` each), a transaction of up
        to OWNERS_PER_TRANSACTION owners and at most one chunk of documents at a time, then
        the runs' progress; raises only when PostgreSQL (or Kafka, for a continuation) is
        unwell (the caller retries: owners already committed are then settled by the ledger).

        An owner not finished at the end of a chunk is continued after the others: on Kafka by
        a work item of its own on the partition its item came from (sent before this batch is
        acked), so the owners queued behind it wait for one chunk of it, not for all of it;
        otherwise here, once the rest of the batch is done."""
        result = OwnerBatchResult()
        per_run: PerItem = defaultdict(Counter)
        pending = items
        while pending:
            deferred = await self._round(pending, result, per_run)
            remote = [p for p in deferred if self._continued_on_kafka(p)]
            if remote:
                assert self.continuations is not None
                await self.continuations.send(
                    [(p.event, OwnersWork.continuation(self._continuation(p))) for p in remote]
                )
            pending = [
                (p.message, p.event, self._continuation(p))
                for p in deferred
                if not self._continued_on_kafka(p)
            ]
        await self._progress(per_run)
        for threshold, n in result.by_threshold.items():
            self.metrics.reminders.labels(str(threshold)).inc(n)
        self._add_totals(result)
        return result

    async def _round(
        self,
        items: Sequence[tuple[int, Any, OwnerWork]],
        result: OwnerBatchResult,
        per_run: PerItem,
    ) -> list[OwnerPlan]:
        """One pass over ``items``; returns the plans of owners left unfinished at a chunk's
        end (``resume_after`` set)."""
        # A redelivered item within one batch is the same owner's same work: keep the last.
        latest: dict[tuple[str, UUID], OwnerPlan] = {}
        for position, (message, event, work) in enumerate(items):
            latest[(work.run_id, work.owner_user_id)] = OwnerPlan(position, message, event, work)
        groups: dict[tuple[datetime, tuple[int, ...]], list[OwnerPlan]] = defaultdict(list)
        for plan in latest.values():
            groups[(plan.work.as_of, plan.work.thresholds_days)].append(plan)
        deferred: list[OwnerPlan] = []
        for (as_of, thresholds), group in groups.items():
            result.owners += sum(1 for p in group if p.work.after is None)
            # Two runs of one slot (a rerun) can put one owner twice in a group: the same
            # work, done once (the second plan has nothing to do and is only counted as done).
            first: dict[UUID, OwnerPlan] = {}
            for plan in group:
                first.setdefault(plan.work.owner_user_id, plan)
            fresh = sorted(
                (p for p in first.values() if p.work.after is None),
                key=lambda p: p.work.owner_user_id,
            )
            twins = [p for p in group if first[p.work.owner_user_id] is not p]
            self._count(twins, set(), per_run, result)
            # Owners in OwnerUserId order (the chunks' keyset); a continuation alone.
            chunks = [
                fresh[start : start + OWNERS_PER_TRANSACTION]
                for start in range(0, len(fresh), OWNERS_PER_TRANSACTION)
            ]
            chunks += [[p] for p in first.values() if p.work.after is not None]
            settled = await in_flight(
                [self._settle(chunk, as_of, thresholds, result) for chunk in chunks],
                TRANSACTIONS_IN_FLIGHT,
            )
            for chunk, failed in zip(chunks, settled, strict=True):
                deferred += [
                    p for p in chunk if p.resume_after is not None and p.position not in failed
                ]
                self._count(chunk, failed, per_run, result)
        return deferred

    def _continued_on_kafka(self, plan: OwnerPlan) -> bool:
        return self.continuations is not None and item_key(plan.event) is not None

    @staticmethod
    def _continuation(plan: OwnerPlan) -> OwnerWork:
        """``plan``'s work from where its last chunk ended (notified once it sent anything)."""
        work = plan.work
        return replace(work, after=plan.resume_after, notified=work.notified or plan.notified_here)

    async def _settle(
        self,
        plans: list[OwnerPlan],
        as_of: datetime,
        thresholds: tuple[int, ...],
        result: OwnerBatchResult,
    ) -> set[int]:
        """Settle by the verified cache what it can, the rest through the ledger; returns the
        positions of owners that failed."""
        misses: list[OwnerPlan] = []
        claiming: Claims = {}
        for plan in plans:
            # A continuation is a large owner: the cache holds nothing for it.
            if self.cache is not None and plan.work.after is None:
                plan.cached = self._peek(plan)
                claimed = claimed_marks(plan.cached)
                if claimed:
                    claiming[plan.work.owner_user_id] = (plan, claimed)
                    continue
            misses.append(plan)
        settled = (
            await verify(
                await self.runtime.pool(), claiming, as_of, thresholds, result, self.metrics
            )
            if claiming
            else set()
        )
        misses.extend(p for p, _ in claiming.values() if p.position not in settled)
        if self.cache is not None:
            self.cache.record(True, len(settled))
            self.cache.record(False, len(misses))
        self.metrics.owners.labels("cache").inc(len(settled))
        failed: set[int] = (
            await self.ledger.commit(await self.runtime.pool(), misses, as_of, thresholds)
            if misses
            else set()
        )
        committed = [p for p in misses if p.position not in failed]
        faults.hit("expiry_owners.after_commit")
        remember = [e for p in committed if (e := self._after_commit(p, result))]
        if self.cache is not None:
            await self.cache.put_many(remember)  # one changelog batch, not a record per owner
        self.metrics.owners.labels("ledger").inc(len(misses) - len(failed))
        return failed

    def _peek(self, plan: OwnerPlan) -> Any:
        """The owner's cache value, read in its work item's partition (where it is written)
        when it came from Kafka, instead of in every partition."""
        assert self.cache is not None
        key = plan.work.owner_key
        if item_key(plan.event) is None:
            return self.cache.peek(key)
        return self.cache.read(plan.event, key)

    def _after_commit(
        self, plan: OwnerPlan, result: OwnerBatchResult
    ) -> tuple[Any, str, Any] | None:
        """Committed: count, log; returns what the cache may learn (None: nothing new)."""
        work = plan.work
        result.ledger += 1
        result.skipped += plan.skipped
        if plan.won:
            result.by_threshold.update(plan.won)
            result.applied_positions.add(plan.message)
            if not work.notified:
                result.notified += 1
            result.sent += len(plan.won)
            if log.isEnabledFor(logging.INFO):  # one line per owner and chunk: counts
                items = logged_items(plan.logged)
                logs.event(
                    log,
                    logging.INFO,
                    "reminder_queued",
                    run_id=work.run_id,
                    owner_user_id=work.owner_user_id,
                    count=len(plan.won),
                    thresholds=threshold_counts(plan.won),
                    continued="yes" if plan.resume_after is not None else "no",
                    documents=queued_documents(items),
                )
                if log.isEnabledFor(ITEM_LEVEL):  # the seed's per-document line (no NumberMask)
                    for document_id, type_, t_star, days_left in items:
                        logs.event(
                            log,
                            ITEM_LEVEL,
                            "reminder_document_queued",
                            run_id=work.run_id,
                            owner_user_id=work.owner_user_id,
                            document_id=document_id,
                            type=type_,
                            threshold_days=t_star,
                            days_left=days_left,
                        )
        if self.cache is not None and plan.event is not None and work.after is None:
            value = committed_value(plan)
            if value != plan.cached and (value or plan.cached):
                return plan.event, work.owner_key, value
        return None

    def _owner_failed(self, work: OwnerWork, exc: BaseException) -> None:
        self.metrics.errors.inc()
        self.metrics.owners.labels("failed").inc()
        logs.event(
            log,
            logging.ERROR,
            "owner_failed",
            run_id=work.run_id,
            owner_user_id=work.owner_user_id,
            work_id=work.work_id,
            error=type(exc).__name__,
            sqlstate=getattr(exc, "sqlstate", None) or "-",
        )

    @staticmethod
    def _count(
        plans: list[OwnerPlan],
        failed: set[int],
        per_run: PerItem,
        result: OwnerBatchResult,
    ) -> None:
        """Add what ``plans`` did to their runs' progress counts."""
        result.failed += len(failed)
        for plan in plans:
            p = per_run[(plan.work.run_id, progress_item(plan, plan.position in failed))]
            if plan.position in failed:
                p["done"] += 1
                p["failed"] += 1
                continue
            if plan.resume_after is None:  # an unfinished owner is done by its continuation
                p["done"] += 1
            if plan.won:
                if not plan.work.notified:
                    p["notified"] += 1
                p["sent"] += len(plan.won)
            if plan.skipped:
                p["skipped"] += plan.skipped
            plan.won, plan.marks, plan.logged = [], "", None  # counted: let a large batch's go

    async def _progress(self, per_run: PerItem) -> None:
        if per_run:
            await runs_repo.progress(
                await self.runtime.pool(),
                [RunProgress(run_id, item, **counts) for (run_id, item), counts in per_run.items()],
            )

    def _add_totals(self, result: OwnerBatchResult) -> None:
        for name in TOTALS:
            setattr(self.totals, name, getattr(self.totals, name) + getattr(result, name))


def item_ids(decoded: Decoded[OwnersWork]) -> list[tuple[str, str]]:
    """(run id, item) under which a record's progress may have been counted: its own, and for
    a continuation its owner's (a chain of continuations of that owner came to its end)."""
    key = item_key(decoded.event)
    if key is None:
        return []
    work = decoded.message
    out = [(work.run_id, key)]
    if work.after_document_id is not None:
        out.append((work.run_id, owner_item(work.owner_user_ids[0])))
    return out


def progress_item(plan: OwnerPlan, failed: bool) -> str | None:
    """The item ``plan``'s counts go under: its record's, or its owner's when the plan is the
    last chunk of a continued owner (done, or failed)."""
    key = item_key(plan.event)
    finished = failed or plan.resume_after is None
    if key is not None and plan.work.after is not None and finished:
        return owner_item(plan.work.owner_user_id)
    return key
