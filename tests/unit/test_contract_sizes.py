"""The size contract: every produced contract has a largest message, checked when its outbox
record is built, and the relay producer's limit must fit every one."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, date, datetime

import pytest

from devkit.messages.factories import reminder_due
from streams.contracts import (
    DOCUMENT_EXPIRY_REMINDERS,
    RECORD_OVERHEAD_BYTES,
    REMINDER_DUE,
    ContractTooLarge,
    produced_contracts,
)
from streams.contracts.profile import (
    MAX_DOCUMENTS_PER_EVENT,
    DocumentExpiryReminderEvent,
    ExpiringDocumentItem,
)
from streams.outbox.config import RelayConfig
from streams.outbox.records import record_for
from streams.settings import ConfigError, Settings
from streams.slices.profile.settings import DocumentExpirySettings


def test_every_produced_contract_fits_the_default_producer_limit() -> None:
    limit = Settings(database_url="postgresql://x@h/x").outbox_max_record_bytes
    assert produced_contracts(), "the service produces some contracts"
    for contract in produced_contracts():
        assert 0 < contract.max_payload_bytes <= limit - RECORD_OVERHEAD_BYTES, contract.name
    assert (
        RelayConfig.from_settings(Settings(database_url="postgresql://x@h/x")).max_record_bytes
        == limit
    )


def test_a_message_over_its_contract_size_is_refused_when_its_record_is_built() -> None:
    message = reminder_due()
    size = len(message.to_json())
    exact = dataclasses.replace(REMINDER_DUE, max_payload_bytes=size)
    assert len(record_for(exact, message).payload.encode()) == size
    smaller = dataclasses.replace(REMINDER_DUE, max_payload_bytes=size - 1)
    with pytest.raises(ContractTooLarge) as raised:
        record_for(smaller, message)
    assert (raised.value.size, raised.value.limit) == (size, size - 1)
    assert REMINDER_DUE.name in str(raised.value)
    assert str(message.event_id) not in str(raised.value), "no values in the error"


def test_a_producer_limit_below_a_contract_is_refused_at_startup_naming_both() -> None:
    settings = Settings(database_url="postgresql://x@h/x", outbox_max_record_bytes=500_000)
    with pytest.raises(ConfigError) as raised:
        RelayConfig.from_settings(settings)
    assert "OUTBOX_MAX_RECORD_BYTES (500000)" in str(raised.value)
    assert "max_payload_bytes" in str(raised.value)


@pytest.mark.parametrize("split", ["default", "largest allowed"])
def test_the_largest_document_expiry_event_fits_its_contract(split: str) -> None:
    """DOCUMENT_EXPIRY_MAX_DOCUMENTS_PER_EVENT (default 1,000; at most the contract's
    MAX_DOCUMENTS_PER_EVENT) items of the largest kind: every string at its max_length, in
    4-byte characters (UTF-8 is not ASCII: the seeds' document types are Russian and
    Vietnamese)."""
    per_event = (
        Settings(database_url="postgresql://x@h/x")
        .of(DocumentExpirySettings)
        .document_expiry_max_documents_per_event
        if split == "default"
        else MAX_DOCUMENTS_PER_EVENT
    )
    item = ExpiringDocumentItem(
        document_id=uuid.uuid4(),
        type="\U0001d11e" * 32,
        number_mask="\U0001d11e" * 64,
        expires_at=date(2026, 1, 1),
        threshold_days=2**31,
        days_left=-(2**31),
    )
    event = DocumentExpiryReminderEvent(
        owner_user_id=uuid.uuid4(), reminded_at=datetime.now(UTC), documents=[item] * per_event
    )
    record = record_for(DOCUMENT_EXPIRY_REMINDERS, event)
    assert len(record.payload.encode()) <= DOCUMENT_EXPIRY_REMINDERS.max_payload_bytes
