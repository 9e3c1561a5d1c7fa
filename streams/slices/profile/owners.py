"""The per-owner half of a document expiry run: an owner's markers (insert-wins) and its one
DocumentExpiryReminderEvent in one transaction, with the owner's known marks cached.

Owners are committed up to OWNERS_PER_TRANSACTION per transaction; a group that fails for
anything but an unwell database (bad data, or a lock timeout, serialization failure or
deadlock on one owner's rows) is halved until the failing owner is alone (logged, counted,
skipped: the next cycle takes it), so every other owner commits whole in the same run. The cache (a changelog table keyed by
OwnerUserId: document → marked thresholds) only saves work: an owner it says is settled is
settled only once one read of the ledger finds every one of those marks; otherwise the
ledger decides. It is written after the commit. Design: docs/architecture.md.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any
from uuid import UUID

from db import document_expiry_reminders as marks_repo
from db import document_expiry_runs as runs_repo
from db.connector import Connection, is_transient, transaction
from db.document_expiry_reminders import ClaimedDocument
from db.document_expiry_runs import RunProgress
from streams import faults
from streams.asynctools import in_flight
from streams.contracts.profile import ExpiringDocumentItem
from streams.domain.profile import (
    crossed,
    decode_marks,
    encode_marks,
    scan_window,
    settled_by,
    utc_date,
)
from streams.input.consumer import Decoded
from streams.outbox.records import OutboxRecord, insert_many
from streams.runtime import Runtime
from streams.slices.profile.metrics import DocumentExpiryMetrics
from streams.slices.profile.reminders import (
    queued_documents,
    reminder_items,
    reminder_records,
    threshold_counts,
)
from streams.slices.profile.settings import DocumentExpirySettings
from streams.slices.profile.work import Continuations, DoneItems, OwnersWork, OwnerWork, item_key
from streams.tables.cache import KeyCache

log = logging.getLogger("streams.slices.profile.owners")

NIL = UUID(int=0)

# Owners per transaction (group commit): a million documents cannot afford one each.
OWNERS_PER_TRANSACTION = 500
# Transient SQLSTATEs that one owner's rows can cause while the database is well: a
# serialization failure, a deadlock, a lock wait past lock_timeout (a marker held by another
# session). A group failing with one of these is split like one failing on bad data, so the
# other owners commit in the same run; the owner left alone is failed, counted, and taken by
# the next cycle. Anything else transient (connection lost, disk full, shutdown) is the
# database being unwell for every owner: the batch raises (or fails whole, inline).
OWNER_SCOPED_STATES = frozenset({"40001", "40P01", "55P03"})
# Documents an owner's cache value covers at most (~46 characters each): a larger owner
# gets an empty value and goes to the ledger, chunk by chunk, so no value (and no changelog
# record) grows with the owner.
CACHE_MAX_DOCUMENTS = 1000
CACHE_MAX_CHARS = CACHE_MAX_DOCUMENTS * 64
# Transactions of one batch in flight at once: while PostgreSQL runs one claim, the worker
# builds the events of another (their owners are disjoint, so they never wait on each other).
TRANSACTIONS_IN_FLIGHT = 2


@dataclass
class OwnerPlan:
    """One owner of a batch: its work item and, once claimed, its documents in the window."""

    position: int
    """The owner's index in the batch (failures are told apart by it)."""
    message: int
    """The index of the work item it came in (the consumer's outcome is per item)."""
    event: Any
    work: OwnerWork
    cached: Any = None
    """The cache's value for the owner as read (written back only when it changes)."""
    docs: list[ClaimedDocument] = field(default_factory=list)
    """The owner's documents in the window as its transaction saw them."""
    items: list[ExpiringDocumentItem] = field(default_factory=list)
    """What the owner's events list (one per document whose t* this transaction won)."""
    skipped: int = 0
    resume_after: UUID | None = None
    """Set when the owner's documents went on past the end of its chunk: the last one
    claimed, after which its continuation starts."""
    notified_here: bool = False
    """This plan's transaction sent the owner at least one event."""


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


# The counters of a batch that add up into the worker's totals (/status).
TOTALS = [f.name for f in fields(OwnerBatchResult) if f.type == "int"]


def owner_scoped(exc: BaseException) -> bool:
    """A transient error that one owner's rows can cause (``OWNER_SCOPED_STATES``)."""
    return getattr(exc, "sqlstate", None) in OWNER_SCOPED_STATES


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
        self.totals = OwnerBatchResult()
        self.done_items = DoneItems()

    async def __call__(self, batch: Sequence[Decoded[OwnersWork]]) -> OwnerBatchResult:
        """The agent's ``apply``: the owners of every work item not done here before.

        A record this worker already did and counted can be delivered to it again (a tail
        read by the consumer's gap healer that the stream delivers after all, a rewind to
        the committed offset): the ledger would make it a no-op, but the run's progress
        would count its owners twice and the run would stop waiting too early, so it is
        skipped."""
        items: list[tuple[int, Any, OwnerWork]] = []
        done: list[tuple[int, int, str]] = []
        for i, decoded in enumerate(batch):
            key = item_key(decoded.event, decoded.message.run_id)
            if key is not None:
                if key in self.done_items:
                    continue
                done.append(key)
            items.extend((i, decoded.event, work) for work in decoded.message.works())
        if len(done) < len(batch):
            log.info("action=work_replay_skipped items=%d", len(batch) - len(done))
        result = await self.process(items)
        self.done_items.extend(done)
        return result

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
            per_run: dict[str, Counter[str]] = defaultdict(Counter)
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
        per_run: dict[str, Counter[str]] = defaultdict(Counter)
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
        per_run: dict[str, Counter[str]],
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
        return self.continuations is not None and item_key(plan.event, "") is not None

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
        claiming: dict[UUID, tuple[OwnerPlan, dict[str, frozenset[int]]]] = {}
        for plan in plans:
            # A continuation is a large owner: the cache holds nothing for it.
            if self.cache is not None and plan.work.after is None:
                plan.cached = self._peek(plan)
                # A value longer than this version writes (an older one's) claims nothing.
                bounded = not isinstance(plan.cached, str) or len(plan.cached) <= CACHE_MAX_CHARS
                claimed = decode_marks(plan.cached) if bounded else {}
                if claimed:
                    claiming[plan.work.owner_user_id] = (plan, claimed)
                    continue
            misses.append(plan)
        settled = await self._verify(claiming, as_of, thresholds, result) if claiming else []
        misses.extend(p for p, _ in claiming.values() if p.position not in settled)
        if self.cache is not None:
            self.cache.record(True, len(settled))
            self.cache.record(False, len(misses))
        self.metrics.owners.labels("cache").inc(len(settled))
        failed: set[int] = await self._commit(misses, as_of, thresholds) if misses else set()
        committed = [p for p in misses if p.position not in failed]
        faults.hit("expiry_owners.after_commit")
        remember = [e for p in committed if (e := self._after_commit(p, thresholds, result))]
        if self.cache is not None:
            await self.cache.put_many(remember)  # one changelog batch, not a record per owner
        self.metrics.owners.labels("ledger").inc(len(misses) - len(failed))
        return failed

    def _peek(self, plan: OwnerPlan) -> Any:
        """The owner's cache value, read in its work item's partition (where it is written)
        when it came from Kafka, instead of in every partition."""
        assert self.cache is not None
        key = str(plan.work.owner_user_id)
        if item_key(plan.event, "") is None:
            return self.cache.peek(key)
        return self.cache.read(plan.event, key)

    async def _verify(
        self,
        claiming: dict[UUID, tuple[OwnerPlan, dict[str, frozenset[int]]]],
        as_of: datetime,
        thresholds: tuple[int, ...],
        result: OwnerBatchResult,
    ) -> set[int]:
        """Positions of the owners the cache settles: it claims every crossed threshold of
        every document in the window, and one read of the ledger finds every one of them."""
        today = utc_date(as_of)
        window = scan_window(today, thresholds)
        # One document more than a value names is enough to refuse it (every document in
        # the window crosses a threshold), so no owner, however large, is read in full.
        most = {owner: len(claimed) + 1 for owner, (_, claimed) in claiming.items()}
        docs = await marks_repo.check(
            await self.runtime.pool(), most, window.lo, window.hi, today, thresholds
        )
        hits: dict[UUID, dict[str, frozenset[int]]] = defaultdict(dict)
        unmarked: Counter[UUID] = Counter()
        for d in docs:
            hits[d.owner_user_id][str(d.document_id)] = crossed(d.days_left, thresholds)
            unmarked[d.owner_user_id] += d.unmarked
        settled: set[int] = set()
        lied = 0
        for owner, (plan, claimed) in claiming.items():
            hit = hits.get(owner)
            # Not covered (a threshold crossed since, a new document, or nothing in the window
            # any more): the ledger decides, and the cache is rewritten.
            if not hit or not settled_by(hit, claimed):
                continue
            if unmarked[owner]:
                lied += 1  # the cache claims marks the ledger does not have: it must not decide
                continue
            plan.skipped = sum(len(ts) for ts in hit.values())
            settled.add(plan.position)
        if lied:
            result.disagreements += 1
            self.metrics.cache_disagreements.inc()
            log.warning("action=cache_disagreed owners=%d settled=%d", lied, len(settled))
        result.settled_by_cache += len(settled)
        return settled

    async def _commit(
        self, plans: list[OwnerPlan], as_of: datetime, thresholds: tuple[int, ...]
    ) -> set[int]:
        """``plans``, in OwnerUserId order, a chunk at a time, each chunk one transaction
        (its markers and its owners' outbox rows), until every owner is claimed or left
        unfinished at a chunk's end (a large owner: continued later). If a chunk fails for
        anything but an unwell database (bad data, or a transient error one owner's rows can
        cause: ``owner_scoped``), each half of the owners it was to cover again on its own,
        down to single owners, so one bad owner is logged and skipped while the others
        commit. Returns the failed positions."""
        pool = await self.runtime.pool()
        failed: set[int] = set()
        remaining = sorted(plans, key=lambda p: p.work.owner_user_id)
        while remaining:
            try:
                async with transaction(pool) as conn:
                    covered = await self._claim(conn, remaining, as_of, thresholds)
            except Exception as exc:
                if is_transient(exc) and not owner_scoped(exc):
                    raise
                if len(remaining) == 1:
                    self._owner_failed(remaining[0].work, exc)
                    return failed | {remaining[0].position}
                half = len(remaining) // 2
                failed |= await self._commit(remaining[:half], as_of, thresholds)
                return failed | await self._commit(remaining[half:], as_of, thresholds)
            faults.hit("expiry_owners.after_chunk")
            remaining = remaining[covered:]
        return failed

    async def _claim(
        self,
        conn: Connection,
        plans: list[OwnerPlan],
        as_of: datetime,
        thresholds: tuple[int, ...],
    ) -> int:
        """One chunk of ``plans`` on ``conn``'s transaction (the seed's steps 3-6): markers and
        outbox rows of at most ``self.chunk`` documents, from the first plan's first document
        (or its continuation's cursor) on. Returns how many plans the chunk covered: the last
        of them is left unfinished (``resume_after``) when the chunk was full.

        t* is decided by the insert: the smallest threshold this transaction newly marked.
        Alone that is min(crossed - marked) exactly; next to a parallel instance it never
        loses a reminder to a marker the SKIP LOCKED read passed over."""
        today = utc_date(as_of)
        window = scan_window(today, thresholds)
        by_owner: dict[UUID, OwnerPlan] = {}
        for plan in plans:
            plan.docs, plan.items, plan.skipped = [], [], 0
            plan.resume_after, plan.notified_here = None, False
            by_owner[plan.work.owner_user_id] = plan
        head = plans[0].work
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
        )
        for row in rows:
            by_owner[row.owner_user_id].docs.append(row)
        covered = len(plans)
        if len(rows) >= self.chunk:
            # Rows come in OwnerUserId order: the last owner may have more documents.
            last = by_owner[rows[-1].owner_user_id]
            last.resume_after = max(d.document_id for d in last.docs)
            covered = plans.index(last) + 1
        records: list[OutboxRecord] = []
        for plan in plans[:covered]:
            plan.skipped = sum(d.skipped for d in plan.docs)
            plan.items = reminder_items(plan.docs)
            if plan.items:
                plan.notified_here = True
                records += reminder_records(
                    plan.work, as_of, plan.items, self.topic_prefix, self.per_event
                )
        await insert_many(conn, records)
        return covered

    def _after_commit(
        self, plan: OwnerPlan, thresholds: tuple[int, ...], result: OwnerBatchResult
    ) -> tuple[Any, str, Any] | None:
        """Committed: count, log; returns what the cache may learn (None: nothing new)."""
        work = plan.work
        result.ledger += 1
        result.skipped += plan.skipped
        if plan.items:
            for item in plan.items:
                result.by_threshold[item.threshold_days] += 1
            result.applied_positions.add(plan.message)
            if not work.notified:
                result.notified += 1
            result.sent += len(plan.items)
            if log.isEnabledFor(logging.INFO):  # one line per owner and chunk: counts
                log.info(
                    "action=reminder_queued run_id=%s owner_user_id=%s count=%d "
                    "thresholds=%s continued=%s documents=%s",
                    work.run_id,
                    work.owner_user_id,
                    len(plan.items),
                    threshold_counts(plan.items),
                    "yes" if plan.resume_after is not None else "no",
                    queued_documents(plan.items),
                )
        if self.cache is not None and plan.event is not None and work.after is None:
            # After the commit every crossed threshold of these documents has a marker (won
            # here, or by a parallel instance): that is what a later run may claim. An owner
            # left unfinished, or with more documents than a value may hold, gets none (an
            # empty value claims nothing): it goes to the ledger, chunk by chunk.
            small = plan.resume_after is None and len(plan.docs) <= CACHE_MAX_DOCUMENTS
            value = (
                encode_marks({d.document_id: crossed(d.days_left, thresholds) for d in plan.docs})
                if small
                else ""
            )
            if value != plan.cached and (value or plan.cached):
                return plan.event, str(work.owner_user_id), value
        return None

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

    @staticmethod
    def _count(
        plans: list[OwnerPlan],
        failed: set[int],
        per_run: dict[str, Counter[str]],
        result: OwnerBatchResult,
    ) -> None:
        """Add what ``plans`` did to their runs' progress counts."""
        result.failed += len(failed)
        for plan in plans:
            p = per_run[plan.work.run_id]
            if plan.position in failed:
                p["done"] += 1
                p["failed"] += 1
                continue
            if plan.resume_after is None:  # an unfinished owner is done by its continuation
                p["done"] += 1
            if plan.items:
                if not plan.work.notified:
                    p["notified"] += 1
                p["sent"] += len(plan.items)
            if plan.skipped:
                p["skipped"] += plan.skipped
            plan.docs, plan.items = [], []  # counted: let a large batch's documents go

    async def _progress(self, per_run: dict[str, Counter[str]]) -> None:
        if per_run:
            await runs_repo.progress(
                await self.runtime.pool(),
                [RunProgress(run_id, **counts) for run_id, counts in per_run.items()],
            )

    def _add_totals(self, result: OwnerBatchResult) -> None:
        for name in TOTALS:
            setattr(self.totals, name, getattr(self.totals, name) + getattr(result, name))
