"""Contracts: PascalCase wire shape, version gate, value-free error reasons, exported schemas in sync."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest

from devkit.messages.factories import calendar_event, encode
from streams.contracts import CALENDAR_EVENTS, PERSON_DOCUMENTS, ContractError, decode
from streams.contracts.__main__ import DEFAULT_DIR, render
from streams.contracts.calendar import ReminderDueEvent
from streams.slices import catalogue


def test_valid_message_decodes() -> None:
    msg = calendar_event(ClientUserId=str(uuid.uuid4()))
    e = decode(CALENDAR_EVENTS, encode(msg))
    assert str(e.event_id) == msg["EventId"] and e.status.value == "Planned"


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        (b"{nope", "json"),
        (None, "json"),
        (encode(calendar_event(ContractVersion=2)), "contract-version"),
        (encode(calendar_event(Status="Exploded")), "schema"),
        (encode(calendar_event(TimeZone="Mars/Olympus")), "schema"),
        (encode(calendar_event(StartAt="2026-12-01T09:00:00")), "schema"),  # no offset
        (encode(calendar_event(ReminderOffsetsMinutes=[-5])), "schema"),
    ],
)
def test_bad_messages_raise_contract_error_with_kind(raw: bytes | None, kind: str) -> None:
    with pytest.raises(ContractError) as err:
        decode(CALENDAR_EVENTS, raw)
    assert err.value.kind == kind


def test_error_reason_never_contains_input_values() -> None:
    secret = "1234 567890"
    doc = {
        "ContractVersion": 1,
        "DocumentId": "not-a-uuid",
        "OwnerUserId": str(uuid.uuid4()),
        "PersonId": str(uuid.uuid4()),
        "Type": "Passport",
        "NumberMask": secret,
        "ExpiresAt": "2027-01-01",
        "Status": "Active",
        "IsDeleted": False,
        "Version": "x",
        "OccurredAt": datetime.now(UTC).isoformat(),
        "PayloadCipher": "c2VjcmV0",
    }
    with pytest.raises(ContractError) as err:
        decode(PERSON_DOCUMENTS, json.dumps(doc).encode())
    assert "DocumentId" in err.value.reason and secret not in err.value.reason
    assert "not-a-uuid" not in err.value.reason


def test_payload_cipher_is_dropped_at_parse_time() -> None:
    doc = {
        "ContractVersion": 1,
        "DocumentId": str(uuid.uuid4()),
        "OwnerUserId": str(uuid.uuid4()),
        "PersonId": str(uuid.uuid4()),
        "Type": "Passport",
        "NumberMask": "**** **12",
        "ExpiresAt": None,
        "Status": "Active",
        "IsDeleted": False,
        "Version": 1,
        "OccurredAt": datetime.now(UTC).isoformat(),
        "PayloadCipher": "c2VjcmV0",
    }
    parsed = decode(PERSON_DOCUMENTS, json.dumps(doc).encode())
    assert "c2VjcmV0" not in parsed.to_json().decode() and "c2VjcmV0" not in repr(parsed)
    assert "**** **12" not in repr(parsed)


def test_output_uses_pascal_case_and_iso_offsets() -> None:
    e = ReminderDueEvent(
        reminder_id=uuid.uuid4(),
        event_id=uuid.uuid4(),
        tenant_id=uuid.uuid4(),
        owner_user_id=uuid.uuid4(),
        kind="Meeting",
        start_at=datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
        time_zone="UTC",
        offset_minutes=15,
    )
    body = json.loads(e.to_json())
    assert list(body) == [
        "ContractVersion",
        "ReminderId",
        "EventId",
        "TenantId",
        "OwnerUserId",
        "ClientUserId",
        "Kind",
        "StartAt",
        "TimeZone",
        "OffsetMinutes",
        "AppointmentId",
    ]
    assert body["StartAt"] == "2026-12-01T09:00:00+00:00" and body["ContractVersion"] == 1


def test_every_topic_has_a_contract_and_exported_schemas_are_in_sync() -> None:
    assert len({t.name for t in catalogue()}) == len(catalogue()) == 9
    rendered = render()
    for name, text in rendered.items():
        path = DEFAULT_DIR / name
        assert path.exists(), f"{path} missing: run `make contracts`"
        assert path.read_text() == text, f"{path} is stale: run `make contracts`"
