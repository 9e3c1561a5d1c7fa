"""A document-expiry owner's reminders as outbox records: split into events of at most the
configured number of documents, each under Kafka's limit, all with the run's headers; and
the log line's bounded view of them."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.contracts.profile import ExpiringDocumentItem
from streams.slices.profile.reminders import (
    LOG_DOCUMENTS_MAX,
    queued_documents,
    reminder_records,
    threshold_counts,
)
from streams.slices.profile.work import RunOrder

SLOT = datetime(2026, 6, 10, 0, 30, tzinfo=UTC)
WORK = RunOrder("document-expiry", "run-1", SLOT, (30, 7, 1, 0)).work(uuid.uuid4())


def item(threshold: int = 7) -> ExpiringDocumentItem:
    # The largest item the contract allows: a 32-character Type, a 64-character NumberMask.
    return ExpiringDocumentItem(
        document_id=uuid.uuid4(),
        type="T" * 32,
        number_mask="*" * 64,
        expires_at=date(2026, 6, 17),
        threshold_days=threshold,
        days_left=-3650,
    )


@given(st.integers(1, 2500), st.integers(1, 700))
def test_every_item_is_in_exactly_one_event_of_at_most_per_event(n: int, per_event: int) -> None:
    items = [item()] * n
    records = reminder_records(WORK, SLOT, items, "", per_event)
    sizes = [len(json.loads(r.payload)["Documents"]) for r in records]
    assert sum(sizes) == n and max(sizes) <= per_event
    assert len(records) == -(-n // per_event)
    assert {r.headers["correlation-id"] for r in records} == {"run-1"}
    assert {r.headers["work-id"] for r in records} == {WORK.work_id}
    assert {r.key for r in records} == {str(WORK.owner_user_id)}


def test_the_largest_setting_keeps_an_event_of_the_largest_items_under_one_mebibyte() -> None:
    (record,) = reminder_records(WORK, SLOT, [item() for _ in range(1800)], "", 1800)
    assert len(record.payload.encode()) < 1024 * 1024


def test_the_default_keeps_an_event_of_the_largest_items_under_a_third_of_a_mebibyte() -> None:
    records = reminder_records(WORK, SLOT, [item() for _ in range(2500)], "", 1000)
    assert max(len(r.payload.encode()) for r in records) < 1024 * 1024 // 3


def test_per_event_must_be_positive() -> None:
    with pytest.raises(ValueError):
        reminder_records(WORK, SLOT, [item()], "", 0)


def test_a_log_line_lists_a_few_documents_and_counts_the_rest() -> None:
    few = [item(7), item(0), item(7)]
    assert queued_documents(few).count(":") == 3 * 3
    assert threshold_counts(few) == "7:2,0:1"
    many = [item(30)] * (LOG_DOCUMENTS_MAX + 1)
    assert queued_documents(many) == "-"
    assert threshold_counts(many) == f"30:{LOG_DOCUMENTS_MAX + 1}"
