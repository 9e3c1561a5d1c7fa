"""Profile contracts: person document state in, DocumentExpiryReminderKafkaEvent out (seed 001)."""

from __future__ import annotations

from datetime import date
from enum import StrEnum
from uuid import UUID

from pydantic import BaseModel, Field

from streams.contracts.base import MAX_VERSION, Contract, Instant, StateMessage


class DocumentStatus(StrEnum):
    ACTIVE = "Active"
    ARCHIVED = "Archived"


class PersonDocumentChanged(StateMessage):
    """pin.profile.person-documents.v1 — open columns only.

    PayloadCipher is deliberately not a field: it is dropped at parse time, so it can
    never be stored, decoded or logged by this service.
    """

    document_id: UUID
    owner_user_id: UUID
    person_id: UUID
    type: str = Field(min_length=1, max_length=32)
    number_mask: str | None = Field(default=None, max_length=64, repr=False)
    expires_at: date | None = None
    status: DocumentStatus
    is_deleted: bool = False
    version: int = Field(ge=0, le=MAX_VERSION)
    occurred_at: Instant


class ExpiringDocumentItem(BaseModel):
    """One document of a reminder (SPEC §2: DocumentId, Type, NumberMask, ExpiresAt,
    ThresholdDays, DaysLeft). A part of the event, not a message: no ContractVersion of its
    own (the event carries it)."""

    model_config = Contract.model_config | {"extra": "forbid"}

    document_id: UUID
    type: str = Field(min_length=1, max_length=32)
    number_mask: str | None = Field(default=None, max_length=64, repr=False)
    expires_at: date
    threshold_days: int = Field(ge=0)
    days_left: int


# The most documents one event may list (DOCUMENT_EXPIRY_MAX_DOCUMENTS_PER_EVENT is at most
# this): 1,800 of the largest items, every string at its max_length in 4-byte UTF-8
# characters (~526 bytes each), are ~947 KB, under the contract's max_payload_bytes.
MAX_DOCUMENTS_PER_EVENT = 1800


class DocumentExpiryReminderEvent(Contract):
    """pin.profile.document-expiry-reminders.v1 — an owner's reminders of one run
    (DocumentExpiryReminderKafkaEvent): one event, or several when the owner has more than
    DOCUMENT_EXPIRY_MAX_DOCUMENTS_PER_EVENT (default 1,000, at most 1,800) documents to be
    reminded of. Every event of the owner's run carries the run's correlation-id (and the
    owner's work-id) header; each document is listed in exactly one of them. Consumers that
    want the owner's whole list group by aggregate-id and correlation-id; deduplication by
    OwnerUserId + DocumentId/ThresholdDays (seed 001) is unchanged."""

    owner_user_id: UUID
    reminded_at: Instant
    documents: list[ExpiringDocumentItem] = Field(min_length=1, max_length=MAX_DOCUMENTS_PER_EVENT)
