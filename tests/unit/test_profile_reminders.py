"""What a document-expiry claim is told about its owners' events (topic, RemindedAt, the
split, headers, the contract's item rules), the check of what it reports before the commit,
and the log line's bounded view of the documents sent. The events themselves are written by
the claim statement: tests/integration/test_document_expiry_events_sql.py."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest

from db.document_expiry_reminders import ClaimedOwner
from streams.contracts import DOCUMENT_EXPIRY_REMINDERS, ContractTooLarge
from streams.contracts.profile import DocumentExpiryReminderEvent
from streams.slices.profile.reminders import (
    ITEM_LIMITS,
    LOG_DOCUMENTS_MAX,
    BrokenItem,
    check_events,
    event_headers,
    events_out,
    logged_items,
    queued_documents,
    threshold_counts,
)
from streams.slices.profile.work import RunOrder

SLOT = datetime(2026, 6, 10, 0, 30, tzinfo=UTC)
WORK = RunOrder("document-expiry", "run-1", SLOT, (30, 7, 1, 0)).work(uuid.uuid4())


def owner(
    won: tuple[int, ...] = (7,), breaks: str | None = None, largest: int | None = 400
) -> ClaimedOwner:
    broken = uuid.uuid4() if breaks else None
    return ClaimedOwner(uuid.uuid4(), len(won) + 1, 0, list(won), "", None, broken, breaks,
                        largest, uuid.uuid4())  # fmt: skip


def test_the_item_rules_are_the_contracts() -> None:
    assert ITEM_LIMITS == (1, 32, 64)


def test_reminded_at_is_written_as_the_contract_writes_it() -> None:
    out = events_out(SLOT, "pfx.", 1000, {})
    event = DocumentExpiryReminderEvent.model_validate(
        {"OwnerUserId": str(WORK.owner_user_id), "RemindedAt": SLOT, "Documents": [
            {"DocumentId": str(uuid.uuid4()), "Type": "P", "ExpiresAt": "2026-06-17",
             "ThresholdDays": 7, "DaysLeft": 7}]}
    )  # fmt: skip
    assert out.reminded_at_json == json.dumps(json.loads(event.to_json())["RemindedAt"])
    assert out.topic == f"pfx.{DOCUMENT_EXPIRY_REMINDERS.name}"


@pytest.mark.parametrize("per_event", [0, -1, 1801])
def test_per_event_must_be_within_the_contract(per_event: int) -> None:
    with pytest.raises(ValueError):
        events_out(SLOT, "", per_event, {})


def test_every_event_of_the_run_carries_its_ids_and_the_contracts_headers() -> None:
    headers = json.loads(event_headers(WORK, {}))
    assert headers == {
        "correlation-id": "run-1",
        "work-id": WORK.work_id,
        "aggregate-type": "Profile",
        "aggregate-id": str(WORK.owner_user_id),
        "contract-version": "1",
        "event-type": "DocumentExpiryReminderEvent",
    }
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert json.loads(event_headers(WORK, {"traceparent": parent}))["traceparent"] == parent


def test_a_broken_item_or_a_too_large_event_raises_before_the_commit() -> None:
    check_events([owner(), owner((), largest=None)])
    check_events([])
    with pytest.raises(BrokenItem, match="Type") as raised:
        check_events([owner(), bad := owner(breaks="Type")])
    assert str(bad.broken_document) in str(raised.value)
    limit = DOCUMENT_EXPIRY_REMINDERS.max_payload_bytes
    check_events([owner(largest=limit)])
    with pytest.raises(ContractTooLarge):
        check_events([owner(largest=limit + 1)])


def test_the_logged_items_are_read_as_the_claim_reports_them() -> None:
    doc = uuid.uuid4()
    assert logged_items(json.dumps([[str(doc), "Pass:port,x", 7, -3]])) == [
        (str(doc), "Pass:port,x", 7, -3)
    ]
    assert logged_items(None) == []


def test_a_log_line_lists_a_few_documents_and_counts_the_rest() -> None:
    few = [(str(uuid.uuid4()), "Passport", t, -3) for t in (7, 0, 7)]
    assert queued_documents(few).count(":") == 3 * 3
    assert threshold_counts([7, 0, 7]) == "7:2,0:1"
    many = few[:1] * (LOG_DOCUMENTS_MAX + 1)
    assert queued_documents(many) == "-"
    assert threshold_counts([30] * (LOG_DOCUMENTS_MAX + 1)) == f"30:{LOG_DOCUMENTS_MAX + 1}"
