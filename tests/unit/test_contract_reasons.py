"""A contract violation's reason (DLQ header, log, /status) never quotes the input: not even
one character of it, as pydantic's UUID message does ("found `Z` at 0")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devkit.harness.profile import person_document
from streams.contracts import PERSON_DOCUMENTS, SOURCE_EVENTS, ContractError, decode

# A character no reason of ours contains: if it shows up, it came from the input.
MARK = "Ω"


def _reason(contract: Any, value: dict[str, Any]) -> str:
    with pytest.raises(ContractError) as raised:
        decode(contract, json.dumps(value).encode())
    return raised.value.reason


@pytest.mark.parametrize(
    "field, value",
    [
        ("DocumentId", MARK),
        ("OwnerUserId", "123e4567-e89b-12d3-a456-42661417400" + MARK),
        ("PersonId", MARK * 36),
        ("ExpiresAt", "2026-01-0" + MARK),
        ("OccurredAt", MARK),
        ("Status", MARK),
        ("Type", MARK * 40),
        ("Version", MARK),
        ("IsDeleted", MARK),
        ("NumberMask", {MARK: MARK}),
    ],
)
def test_no_reason_quotes_the_value_it_refused(field: str, value: object) -> None:
    reason = _reason(PERSON_DOCUMENTS, person_document(**{field: value}))
    assert reason.startswith(field + ":")
    assert MARK not in reason


def test_a_bad_uuid_says_so_without_the_character() -> None:
    assert _reason(PERSON_DOCUMENTS, person_document(DocumentId="Zx")) == (
        "DocumentId: Input should be a valid UUID"
    )


def test_messages_from_the_schema_and_our_validators_are_kept() -> None:
    assert _reason(PERSON_DOCUMENTS, person_document(Type="x" * 40)) == (
        "Type: String should have at most 32 characters"
    )
    source = {
        "ContractVersion": 1,
        "SourceType": "Room",
        "SourceGuid": "123e4567-e89b-12d3-a456-426614174000",
        "BusinessUnitId": "123e4567-e89b-12d3-a456-426614174001",
        "Version": 1,
        "OccurredAt": "2026-01-01T00:00:00+00:00",
        "IsActive": True,
        "Attributes": {"Capacity": MARK},
    }
    assert MARK not in _reason(SOURCE_EVENTS, {**source, "Version": MARK})
