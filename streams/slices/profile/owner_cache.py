"""The owner cache's rules for document expiry: what an owner's cached value (document →
marked thresholds) may claim, the one ledger read that must confirm a claim before the
cache settles an owner, and the value an owner's cache entry gets after its commit. The
cache only saves work: whatever it claims that the ledger does not confirm, the ledger
decides.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any
from uuid import UUID

from db import document_expiry_reminders as marks_repo
from streams import logs
from streams.domain.profile import (
    crossed,
    decode_marks,
    scan_window,
    settled_by,
    utc_date,
)
from streams.slices.profile.metrics import DocumentExpiryMetrics
from streams.slices.profile.owner_plan import OwnerBatchResult, OwnerPlan

log = logging.getLogger("streams.slices.profile.owners")

# Documents an owner's cache value covers at most (~46 characters each): a larger owner
# gets an empty value and goes to the ledger, chunk by chunk, so no value (and no changelog
# record) grows with the owner.
CACHE_MAX_DOCUMENTS = 1000
CACHE_MAX_CHARS = CACHE_MAX_DOCUMENTS * 64

Claims = dict[UUID, tuple[OwnerPlan, dict[str, frozenset[int]]]]


def claimed_marks(cached: Any) -> dict[str, frozenset[int]]:
    """What a cached value claims: document → marked thresholds. A value longer than this
    version writes (an older one's) claims nothing."""
    bounded = not isinstance(cached, str) or len(cached) <= CACHE_MAX_CHARS
    return decode_marks(cached) if bounded else {}


async def verify(
    pool: Any,
    claiming: Claims,
    as_of: datetime,
    thresholds: tuple[int, ...],
    result: OwnerBatchResult,
    metrics: DocumentExpiryMetrics,
) -> set[int]:
    """Positions of the owners the cache settles: it claims every crossed threshold of
    every document in the window, and one read of the ledger finds every one of them."""
    today = utc_date(as_of)
    window = scan_window(today, thresholds)
    # One document more than a value names is enough to refuse it (every document in
    # the window crosses a threshold), so no owner, however large, is read in full.
    most = {owner: len(claimed) + 1 for owner, (_, claimed) in claiming.items()}
    docs = await marks_repo.check(pool, most, window.lo, window.hi, today, thresholds)
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
        metrics.cache_disagreements.inc()
        logs.event(log, logging.WARNING, "cache_disagreed", owners=lied, settled=len(settled))
    result.settled_by_cache += len(settled)
    return settled


def committed_value(plan: OwnerPlan) -> str:
    """The cache value of an owner whose transaction committed. After the commit every
    crossed threshold of its documents has a marker (won here, or by a parallel instance):
    that is what a later run may claim (the claim statement writes it, ``plan.marks``). An
    owner left unfinished, or with more documents than a value may hold, gets an empty value
    (it claims nothing): it goes to the ledger, chunk by chunk."""
    if plan.resume_after is not None or plan.documents > CACHE_MAX_DOCUMENTS:
        return ""
    return plan.marks
