"""What an owner's committed claim sends: the ExpiringDocumentItems of the documents whose t*
the claim won, the owner's DocumentExpiryReminderEvents as outbox records (at most
``per_event`` documents each), and what its log line carries (counts, and the identifiers
of a few documents; never NumberMask or any other document value)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from db.document_expiry_reminders import ClaimedDocument
from streams.contracts import DOCUMENT_EXPIRY_REMINDERS
from streams.contracts.profile import DocumentExpiryReminderEvent, ExpiringDocumentItem
from streams.outbox.records import OutboxRecord, record_for
from streams.slices.profile.work import OwnerWork

AGGREGATE_TYPE = "Profile"


def reminder_items(docs: Sequence[ClaimedDocument]) -> list[ExpiringDocumentItem]:
    """One item per document whose t* this claim won (ThresholdDays = t*), in ``docs`` order."""
    return [
        ExpiringDocumentItem(
            document_id=d.document_id,
            type=d.type,
            number_mask=d.number_mask,
            expires_at=d.expires_at,
            threshold_days=d.t_star,
            days_left=d.days_left,
        )
        for d in docs
        if d.t_star is not None
    ]


def reminder_records(
    work: OwnerWork,
    as_of: datetime,
    items: Sequence[ExpiringDocumentItem],
    topic_prefix: str,
    per_event: int,
) -> list[OutboxRecord]:
    """The owner's events (RemindedAt = AsOf) on the outbox, keyed by OwnerUserId, each
    listing at most ``per_event`` of ``items`` in order: the contract's size rule. Every event
    of the owner's run carries the same ``correlation-id`` (the run id) and ``work-id``."""
    if per_event < 1:
        raise ValueError("per_event must be at least 1")
    headers = {
        "correlation-id": work.run_id,
        "work-id": work.work_id,
        "aggregate-type": AGGREGATE_TYPE,
        "aggregate-id": str(work.owner_user_id),
    }
    return [
        record_for(
            DOCUMENT_EXPIRY_REMINDERS,
            DocumentExpiryReminderEvent(
                owner_user_id=work.owner_user_id,
                reminded_at=as_of,
                documents=list(items[start : start + per_event]),
            ),
            topic_prefix=topic_prefix,
            headers=headers,
        )
        for start in range(0, len(items), per_event)
    ]


# Documents a reminder_queued line lists by identifier at most; beyond, only counts.
LOG_DOCUMENTS_MAX = 20


def queued_documents(items: Sequence[ExpiringDocumentItem]) -> str:
    """``DocumentId:Type:ThresholdDays:DaysLeft`` of each item, comma-separated (the seed's
    "reminder queued" identifiers), when there are at most LOG_DOCUMENTS_MAX; otherwise "-"
    (the line's counts say how many): a log line stays short at any owner's size."""
    if len(items) > LOG_DOCUMENTS_MAX:
        return "-"
    return ",".join(f"{i.document_id}:{i.type}:{i.threshold_days}:{i.days_left}" for i in items)


def threshold_counts(items: Sequence[ExpiringDocumentItem]) -> str:
    """``t:n`` per ThresholdDays of ``items`` (descending), comma-separated."""
    counts = Counter(i.threshold_days for i in items)
    return ",".join(f"{t}:{counts[t]}" for t in sorted(counts, reverse=True))
