"""What an owner's committed claim sends. The claim statement writes the owner's
DocumentExpiryReminderEvents to the outbox itself (db/queries/document_expiry_reminders.sql:
the events never travel to the worker and back); this module says how (``events_out``:
topic, RemindedAt, at most ``per_event`` documents each, the owner's headers, the contract's
rules for an item), checks what the statement reports against the contract before the
commit (``check_events``), and what an owner's log line carries (counts, and the identifiers
of a few documents; never NumberMask or any other document value)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from uuid import UUID

from pydantic import TypeAdapter

from db.document_expiry_reminders import ClaimedOwner, EventsOut
from streams.contracts import DOCUMENT_EXPIRY_REMINDERS, ContractTooLarge
from streams.contracts.base import Instant
from streams.contracts.profile import MAX_DOCUMENTS_PER_EVENT, ExpiringDocumentItem
from streams.outbox.records import contract_headers
from streams.slices.profile.work import OwnerWork

AGGREGATE_TYPE = "Profile"

_INSTANT = TypeAdapter(Instant)


def _length_rule(field: str) -> tuple[int, int]:
    """The least and most characters ``ExpiringDocumentItem`` allows in ``field``."""
    least, most = 0, 0
    for rule in ExpiringDocumentItem.model_fields[field].metadata:
        least = getattr(rule, "min_length", None) or least
        most = getattr(rule, "max_length", None) or most
    if not most:
        raise RuntimeError(f"ExpiringDocumentItem.{field} has no max_length")
    return least, most


# Type's least and most characters and NumberMask's most, as the contract says: the claim
# statement reports the field of an item it would send that breaks them.
ITEM_LIMITS = (*_length_rule("type"), _length_rule("number_mask")[1])


class BrokenItem(ValueError):
    """A document whose item would break the contract (a field's length): its owner's
    chunk fails before the commit, and the owner is isolated and skipped (no values)."""

    def __init__(self, document_id: UUID, field: str) -> None:
        super().__init__(f"document {document_id}: {field} breaks ExpiringDocumentItem's rules")


# The headers every event carries whatever its owner (the contract's own, the aggregate's
# type), encoded once: a run writes an owner's headers 200,000 times a million documents.
_FIXED_HEADERS = json.dumps(
    contract_headers(DOCUMENT_EXPIRY_REMINDERS, {"aggregate-type": AGGREGATE_TYPE})
)[1:-1]
_json_text = json.encoder.encode_basestring_ascii


def event_headers(work: OwnerWork, trace: Mapping[str, str]) -> str:
    """The headers of the owner's events as JSON text: the run's ``correlation-id`` (every
    event of the run carries it), the owner's ``work-id``, the aggregate, the contract's own,
    and ``trace`` (the owner span's traceparent, when tracing is on)."""
    own = (
        f'"correlation-id": {_json_text(work.run_id)}, "work-id": {_json_text(work.work_id)}, '
        f'"aggregate-id": "{work.owner_key}", '
    )
    if trace:
        own += json.dumps(dict(trace))[1:-1] + ", "
    return "{" + own + _FIXED_HEADERS + "}"


def events_out(
    as_of: datetime, topic_prefix: str, per_event: int, headers: Mapping[UUID, str]
) -> EventsOut:
    """How a claim writes its owners' events (RemindedAt = AsOf, keyed by OwnerUserId, each
    listing at most ``per_event`` of the owner's documents, in order): the contract's size
    rule. ``headers``: each owner's, from ``event_headers``."""
    if not 1 <= per_event <= MAX_DOCUMENTS_PER_EVENT:
        raise ValueError(f"per_event must be between 1 and {MAX_DOCUMENTS_PER_EVENT}")
    return EventsOut(
        topic=f"{topic_prefix}{DOCUMENT_EXPIRY_REMINDERS.name}",
        reminded_at_json=_INSTANT.dump_json(as_of).decode(),
        per_event=per_event,
        headers=headers,
        item_limits=ITEM_LIMITS,
    )


def check_events(owners: Sequence[ClaimedOwner]) -> None:
    """Raise, before the commit, when the claim wrote an event the contract refuses: an item
    whose field breaks its rules (``BrokenItem``), or an event over the contract's
    ``max_payload_bytes`` (``ContractTooLarge``)."""
    if not owners:
        return
    largest = owners[0].largest_event
    if largest is not None and largest > DOCUMENT_EXPIRY_REMINDERS.max_payload_bytes:
        raise ContractTooLarge(
            DOCUMENT_EXPIRY_REMINDERS.name, largest, DOCUMENT_EXPIRY_REMINDERS.max_payload_bytes
        )
    for o in owners:
        if o.broken_document is not None and o.breaks is not None:
            raise BrokenItem(o.broken_document, o.breaks)


# Documents a reminder_queued line lists by identifier at most; beyond, only counts.
LOG_DOCUMENTS_MAX = 20


def logged_items(logged: str | None) -> list[tuple[str, str, int, int]]:
    """The won documents a claim reported for the log (``ClaimedOwner.logged``): (DocumentId,
    Type, t*, DaysLeft) each, in the events' order."""
    return [(str(d), str(ty), int(t), int(left)) for d, ty, t, left in json.loads(logged or "[]")]


def queued_documents(items: Sequence[tuple[str, str, int, int]]) -> str:
    """``DocumentId:Type:ThresholdDays:DaysLeft`` of each item, comma-separated (the seed's
    "reminder queued" identifiers), when there are at most LOG_DOCUMENTS_MAX; otherwise "-"
    (the line's counts say how many): a log line stays short at any owner's size."""
    if len(items) > LOG_DOCUMENTS_MAX:
        return "-"
    return ",".join(f"{d}:{ty}:{t}:{left}" for d, ty, t, left in items)


def threshold_counts(won: Sequence[int]) -> str:
    """``t:n`` per ThresholdDays of the won documents' t* (descending), comma-separated."""
    counts = Counter(won)
    return ",".join(f"{t}:{counts[t]}" for t in sorted(counts, reverse=True))
