"""Outbox records: validation, building from contract models, and the wire headers."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from devkit.messages.factories import reminder_due
from streams.contracts import CALENDAR_EVENTS, REMINDER_DUE
from streams.contracts.calendar import ReminderDueEvent
from streams.maintenance.outbox_retention import RetentionConfig
from streams.outbox.config import RelayConfig
from streams.outbox.records import (
    OUTBOX_ID_HEADER,
    OutboxRecord,
    RecordMaker,
    columns,
    outbox_id_of,
    record_for,
    wire_headers,
)


def test_record_for_uses_contract_topic_key_payload_and_headers() -> None:
    message = reminder_due()
    record = record_for(REMINDER_DUE, message, topic_prefix="t1.", headers={"trace-id": "abc"})

    assert record.topic == "t1.pin.calendar.reminder-due.v1"
    assert record.key == "00000000-0000-0000-0000-0000000000e1"
    assert record.payload == message.to_json().decode()
    assert json.loads(record.payload)["EventId"] == "00000000-0000-0000-0000-0000000000e1"
    assert record.headers == {
        "trace-id": "abc",
        "contract-version": "1",
        "event-type": "ReminderDueEvent",
    }


def test_record_for_without_prefix_uses_the_contract_name() -> None:
    assert record_for(REMINDER_DUE, reminder_due()).topic == "pin.calendar.reminder-due.v1"


def test_record_for_rejects_a_message_of_another_contract() -> None:
    with pytest.raises(TypeError, match="ReminderDueEvent is not the message"):
        record_for(CALENDAR_EVENTS, reminder_due())


def test_record_for_refuses_to_override_contract_headers() -> None:
    with pytest.raises(ValueError, match="event-type"):
        record_for(REMINDER_DUE, reminder_due(), headers={"event-type": "Other"})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"topic": ""}, "non-empty topic"),
        ({"key": None}, "key must be str"),
        ({"payload": b"{}"}, "payload must be JSON text"),
        ({"headers": {"a": 1}}, "must have a str value"),
        ({"headers": {"": "x"}}, "non-empty strings"),
        ({"headers": {OUTBOX_ID_HEADER: "1"}}, "set by the relay"),
    ],
)
def test_outbox_record_validates(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"topic": "t", "key": "k", "payload": "{}", "headers": {}}
    fields.update(kwargs)
    with pytest.raises(ValueError, match=message):
        OutboxRecord(**fields)  # type: ignore[arg-type]


def test_outbox_record_headers_default_to_empty() -> None:
    assert OutboxRecord("t", "k", "{}").headers == {}


def test_wire_headers_put_the_outbox_id_first_and_encode_utf8() -> None:
    headers = wire_headers(12345, {"event-type": "Ä", "x": ""})
    assert headers == [
        ("outbox-id", b"12345"),
        ("event-type", "Ä".encode()),
        ("x", b""),
    ]
    assert outbox_id_of(headers) == 12345


def test_outbox_id_of_a_foreign_record_is_none() -> None:
    assert outbox_id_of([("other", b"1")]) is None
    assert outbox_id_of([]) is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch_size": 0},
        {"max_lanes_per_pass": 0},
        {"max_lanes_per_pass": 65},
        {"poll_interval": 0},
        {"stop_timeout": -1},
    ],
)
def test_relay_config_rejects_bad_values(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="RelayConfig"):
        RelayConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs", [{"chunk_size": 0}, {"budget": timedelta(0)}])
def test_retention_config_rejects_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="RetentionConfig"):
        RetentionConfig(**kwargs)  # type: ignore[arg-type]


def test_columns_encode_each_records_headers_equal_runs_once() -> None:
    run = {"correlation-id": "r1", "contract-version": "1"}
    other = {"correlation-id": "r2", "contract-version": "1"}
    records = [
        OutboxRecord("t", "k1", "{}", dict(run)),
        OutboxRecord("t", "k2", "{}", dict(run)),
        OutboxRecord("t", "k3", "{}", other),
        OutboxRecord("t", "k4", "{}", {}),
        OutboxRecord("t", "k5", "{}", dict(run)),
    ]
    headers = columns(records)[3]
    assert [json.loads(h) for h in headers] == [run, run, other, {}, run]
    assert headers[0] is headers[1]  # one encoding for the run of equal headers


def test_a_record_maker_makes_what_record_for_makes_with_the_headers_worked_out_once() -> None:
    make = RecordMaker(REMINDER_DUE, topic_prefix="t1.", headers={"correlation-id": "r1"})
    messages = [reminder_due(), reminder_due().model_copy(update={"kind": "Ä" * 64})]
    made = [make(m) for m in messages]
    assert made == [
        record_for(REMINDER_DUE, m, topic_prefix="t1.", headers={"correlation-id": "r1"})
        for m in messages
    ]
    assert list(made[0].headers) == ["correlation-id", "contract-version", "event-type"]
    assert made[0].headers is made[1].headers  # one dict for the maker's records


def test_a_contracts_wire_form_is_its_model_dump_by_alias() -> None:
    message = reminder_due().model_copy(update={"kind": 'Ä\n"x'})
    assert message.to_json() == message.model_dump_json(by_alias=True).encode()
    assert json.loads(message.to_json())["Kind"] == 'Ä\n"x'


def test_a_record_maker_refuses_another_model_and_names_a_subclass_as_its_event_type() -> None:
    class LaterDue(ReminderDueEvent):
        pass

    make = RecordMaker(REMINDER_DUE)
    with pytest.raises(TypeError, match="ReminderDueEvent is not the message"):
        RecordMaker(CALENDAR_EVENTS)(reminder_due())  # type: ignore[arg-type]
    later = LaterDue(**reminder_due().model_dump())
    assert make(later).headers["event-type"] == "LaterDue"
    assert make(reminder_due()).headers["event-type"] == "ReminderDueEvent"


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"event-type": "Other"}, "event-type"),
        ({"contract-version": "2"}, "contract-version"),
        ({"a": 1}, "must have a str value"),
        ({"": "x"}, "non-empty strings"),
        ({OUTBOX_ID_HEADER: "1"}, "set by the relay"),
    ],
)
def test_a_record_maker_checks_its_headers_when_made(
    headers: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RecordMaker(REMINDER_DUE, headers=headers)  # type: ignore[arg-type]
