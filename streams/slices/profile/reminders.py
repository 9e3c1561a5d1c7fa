"""What an owner's committed claim sends: the ExpiringDocumentItems of the documents whose t*
the claim won, the owner's one DocumentExpiryReminderEvent as an outbox record, and the
identifiers its log line carries (never NumberMask or any other document value)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from db.profile import ClaimedDocument
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


def reminder_record(
    work: OwnerWork, as_of: datetime, items: list[ExpiringDocumentItem], topic_prefix: str
) -> OutboxRecord:
    """The owner's event (RemindedAt = AsOf) on the outbox, keyed by OwnerUserId."""
    event = DocumentExpiryReminderEvent(
        owner_user_id=work.owner_user_id, reminded_at=as_of, documents=items
    )
    return record_for(
        DOCUMENT_EXPIRY_REMINDERS,
        event,
        topic_prefix=topic_prefix,
        headers={
            "correlation-id": work.run_id,
            "work-id": work.work_id,
            "aggregate-type": AGGREGATE_TYPE,
            "aggregate-id": str(work.owner_user_id),
        },
    )


def queued_documents(items: Sequence[ExpiringDocumentItem]) -> str:
    """``DocumentId:Type:ThresholdDays:DaysLeft`` of each item, comma-separated: the seed's
    "reminder queued" identifiers, for one log line per owner."""
    return ",".join(f"{i.document_id}:{i.type}:{i.threshold_days}:{i.days_left}" for i in items)
