"""The plan of one owner in a document expiry batch (its work item, the documents its
transaction claimed, what its events list) and the counts of one batch
(``OwnerBatchResult``): the data the owner worker (owners.py), its ledger transaction
(owner_ledger.py) and its cache check (owner_cache.py) share.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any
from uuid import UUID

from streams.slices.profile.work import OwnerWork


@dataclass
class OwnerPlan:
    """One owner of a batch: its work item and, once claimed, what its transaction did."""

    position: int
    """The owner's index in the batch (failures are told apart by it)."""
    message: int
    """The index of the work item it came in (the consumer's outcome is per item)."""
    event: Any
    work: OwnerWork
    cached: Any = None
    """The cache's value for the owner as read (written back only when it changes)."""
    documents: int = 0
    """The owner's documents in the window its transaction covered."""
    won: list[int] = field(default_factory=list)
    """t* of each document the owner's events list (whose reminder this transaction won)."""
    marks: str = ""
    """The owner cache's value for those documents once committed (every crossed threshold
    marked): ``document=t,t;document=t``."""
    logged: str | None = None
    """The won documents' identifiers for the log line, as the claim reported them (JSON)."""
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
