"""Fuzzing every input contract: ``decode`` returns a model or raises ContractError, nothing else.

No I/O. The strategies live in devkit/messages/fuzz.py; a new input contract needs one entry
in ``VALID_INPUTS`` there (``test_every_input_contract_has_a_strategy`` insists), and a
new agent's pure rules one entry in ``PURE_RULES`` below.
"""

from __future__ import annotations

import json
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devkit.messages.fuzz import (
    HUGE_STRINGS,
    INPUT_CONTRACTS,
    INSTANT_EXTREMES,
    NUMBER_EXTREMES,
    PII_MARKER,
    STRUCTURAL,
    TZ_FOLDERS,
    TZ_NOT_ZONES,
    TZ_ODD,
    VALID_INPUTS,
    encode,
    hostile_values,
    json_values,
    mutated,
    raw_inputs,
    thresholds,
)
from streams.contracts import (
    BUSINESS_UNITS,
    CALENDAR_EVENTS,
    REMINDER_SETTINGS,
    SOURCE_EVENTS,
    Contract,
    ContractError,
    TopicContract,
    decode,
)
from streams.contracts.calendar import CalendarEventChanged
from streams.domain.calendar import fingerprint, insertable, wanted_reminders

FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ERROR_KINDS = {"json", "schema", "contract-version"}
# Which field of each contract holds an IANA zone.
TZ_FIELD = {CALENDAR_EVENTS.name: "TimeZone", BUSINESS_UNITS.name: "TimeZoneId"}


def _calendar_rules(m: CalendarEventChanged) -> None:
    slots = wanted_reminders(m)
    insertable(slots, m.occurred_at)
    fingerprint(m)


# What each agent computes from a decoded message before it touches PostgreSQL. One line
# per agent; an accepted message must never make these raise.
PURE_RULES: dict[str, Callable[[Any], None]] = {CALENDAR_EVENTS.name: _calendar_rules}

by_name = pytest.mark.parametrize("contract", INPUT_CONTRACTS, ids=lambda c: c.name)


def decode_or_reject(contract: TopicContract[Any], raw: bytes | None) -> Contract | None:
    """The property: a model of the contract, or ContractError with a known kind and a
    bounded, value-free reason. Any other exception fails the test as it is."""
    try:
        model = decode(contract, raw)
    except ContractError as exc:
        assert exc.kind in ERROR_KINDS, exc.kind
        assert isinstance(exc.reason, str) and 0 < len(exc.reason) <= 1000
        assert PII_MARKER not in exc.reason, f"reason echoes an input value: {exc.reason!r}"
        return None
    assert isinstance(model, contract.model)
    return model  # type: ignore[no-any-return]


def assert_accepted_is_usable(contract: TopicContract[Any], model: Contract) -> None:
    """What follows acceptance must not fail either: re-encoding round-trips, the key
    derives, the zone loads, and the agent's pure rules run."""
    again = decode_or_reject(contract, model.to_json())
    assert again == model, f"re-encoded message does not decode to itself: {model.to_json()!r}"
    contract.key(model)
    tz_field = TZ_FIELD.get(contract.name)
    if tz_field is not None:
        zoneinfo.ZoneInfo(json.loads(model.to_json())[tz_field])
    rules = PURE_RULES.get(contract.name)
    if rules is not None:
        rules(model)


def test_every_input_contract_has_a_strategy() -> None:
    assert {c.name for c in INPUT_CONTRACTS} == set(VALID_INPUTS)


@by_name
@FUZZ
@given(data=st.data())
def test_valid_message_round_trips(contract: TopicContract[Any], data: st.DataObject) -> None:
    wire = data.draw(VALID_INPUTS[contract.name](), label="wire")
    model = decode(contract, encode(wire))
    again = decode(contract, model.to_json())
    assert again == model
    # On the wire: PascalCase field names, exactly as the producers send them.
    assert set(json.loads(model.to_json())) >= set(wire) - {"PayloadCipher"}
    assert_accepted_is_usable(contract, model)


@by_name
@FUZZ
@given(raw=st.none() | st.binary(max_size=2048))
def test_random_bytes(contract: TopicContract[Any], raw: bytes | None) -> None:
    decode_or_reject(contract, raw)


@by_name
@FUZZ
@given(value=json_values(40))
def test_random_json_documents(contract: TopicContract[Any], value: Any) -> None:
    decode_or_reject(contract, encode(value))


@by_name
@FUZZ
@given(data=st.data())
def test_mutated_messages(contract: TopicContract[Any], data: st.DataObject) -> None:
    wire = data.draw(mutated(VALID_INPUTS[contract.name]()), label="mutated")
    model = decode_or_reject(contract, encode(wire))
    if model is not None:
        assert_accepted_is_usable(contract, model)


@by_name
@FUZZ
@given(data=st.data())
def test_any_raw_value(contract: TopicContract[Any], data: st.DataObject) -> None:
    raw = data.draw(raw_inputs(VALID_INPUTS[contract.name]()), label="raw")
    model = decode_or_reject(contract, raw)
    if model is not None:
        assert_accepted_is_usable(contract, model)


@by_name
@FUZZ
@given(data=st.data(), value=hostile_values())
def test_one_field_set_to_a_hostile_value(
    contract: TopicContract[Any], data: st.DataObject, value: Any
) -> None:
    wire = data.draw(VALID_INPUTS[contract.name](), label="wire")
    name = data.draw(st.sampled_from(sorted(wire)), label="field")
    model = decode_or_reject(contract, encode({**wire, name: value}))
    if model is not None:
        assert_accepted_is_usable(contract, model)


@pytest.mark.parametrize(
    "contract", [c for c in INPUT_CONTRACTS if c.name in TZ_FIELD], ids=lambda c: c.name
)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_time_zone_that_is_not_a_zone_is_rejected(
    contract: TopicContract[Any], data: st.DataObject
) -> None:
    wire = data.draw(VALID_INPUTS[contract.name](), label="wire")
    for zone in TZ_NOT_ZONES:
        with pytest.raises(ContractError) as err:
            decode(contract, encode({**wire, TZ_FIELD[contract.name]: zone}))
        assert err.value.kind == "schema", zone
        assert TZ_FIELD[contract.name] in err.value.reason


@pytest.mark.parametrize("zone", TZ_FOLDERS + TZ_ODD)
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_tz_folder_or_alias_is_rejected_or_loads(zone: str, data: st.DataObject) -> None:
    # Folders must be refused (IsADirectoryError must not escape); aliases such as
    # "right/UTC" may be refused or accepted, but an accepted one loads.
    wire = data.draw(VALID_INPUTS[CALENDAR_EVENTS.name](), label="wire")
    model = decode_or_reject(CALENDAR_EVENTS, encode({**wire, "TimeZone": zone}))
    if zone in TZ_FOLDERS:
        assert model is None
    if model is not None:
        assert_accepted_is_usable(CALENDAR_EVENTS, model)


def _instant_fields(wire: dict[str, Any]) -> list[str]:
    # ExpiresAt is a date (YYYY-MM-DD), not an instant.
    return [k for k in wire if k.endswith("At") and k != "ExpiresAt"]


@by_name
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_extreme_instants(contract: TopicContract[Any], data: st.DataObject) -> None:
    wire = data.draw(VALID_INPUTS[contract.name](), label="wire")
    for name in _instant_fields(wire) or ["OccurredAt"]:
        for value in INSTANT_EXTREMES:
            model = decode_or_reject(contract, encode({**wire, name: value}))
            if isinstance(value, str) and "-" in value[1:] and "T" not in value:
                assert model is None or name not in wire, f"{name}={value!r} (a date) accepted"
            if isinstance(value, str) and len(value) == 19 and name in wire:
                assert model is None, f"{name}={value!r} (no offset) accepted"
            if model is not None:
                assert_accepted_is_usable(contract, model)


@by_name
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_extreme_numbers(contract: TopicContract[Any], data: st.DataObject) -> None:
    wire = data.draw(VALID_INPUTS[contract.name](), label="wire")
    numeric = [k for k, v in wire.items() if type(v) in (int, float) or isinstance(v, list)]
    for name in numeric:
        for value in NUMBER_EXTREMES:
            for candidate in (value, [value]):
                model = decode_or_reject(contract, encode({**wire, name: candidate}))
                if model is not None:
                    assert_accepted_is_usable(contract, model)
    for version in (-1, 2**63, 2**64, 10**40, -(2**63)):
        # A Version outside PostgreSQL's bigint (or negative) can never be stored or compared.
        assert decode_or_reject(contract, encode({**wire, "Version": version})) is None, version


@by_name
@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    version=st.sampled_from([0, 2, -1, 2**63, "1", "", None, [], {}, 1.5, "NaN"])
    | st.integers().filter(lambda v: v != 1)
    | st.text(max_size=5)
    | st.none()
    | st.lists(st.integers(), max_size=2),
)
def test_unknown_contract_version(
    contract: TopicContract[Any], version: Any, data: st.DataObject
) -> None:
    wire = data.draw(VALID_INPUTS[contract.name](), label="wire")
    with pytest.raises(ContractError) as err:
        decode(contract, encode({**wire, "ContractVersion": version}))
    assert err.value.kind == "contract-version"


@by_name
@FUZZ
@given(data=st.data(), suffix=st.text(max_size=20))
def test_error_reason_never_echoes_a_value(
    contract: TopicContract[Any], data: st.DataObject, suffix: str
) -> None:
    wire = data.draw(VALID_INPUTS[contract.name](), label="wire")
    names = data.draw(st.lists(st.sampled_from(sorted(wire)), min_size=1, max_size=3))
    secret = PII_MARKER + suffix
    bad = {**wire, **{n: secret for n in names}}
    decode_or_reject(contract, encode(bad))  # asserts the marker is not in the reason


def _paths(wire: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every field, and every member of object fields (plus a new member of each)."""
    out: list[tuple[str, ...]] = []
    for name, value in wire.items():
        out.append((*prefix, name))
        if isinstance(value, dict):
            out += _paths(value, (*prefix, name))
            out.append((*prefix, name, "NewMember"))
    return out


def _with(wire: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    head, *rest = path
    if not rest:
        return {**wire, head: value}
    return {**wire, head: _with(dict(wire.get(head) or {}), tuple(rest), value)}


@by_name
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_every_field_with_every_extreme_value(
    contract: TopicContract[Any], data: st.DataObject
) -> None:
    wire = data.draw(VALID_INPUTS[contract.name](), label="wire")
    if contract.name == "pin.automation.reminder-settings.v1":
        wire = {**wire, "TriggerType": "ThresholdCondition"}
        wire["Threshold"] = wire["Threshold"] or data.draw(thresholds(), label="threshold")
    values = (*NUMBER_EXTREMES, *INSTANT_EXTREMES, *TZ_NOT_ZONES, *TZ_ODD, *STRUCTURAL)
    for path in _paths(wire):
        for value in (*values, *HUGE_STRINGS):
            try:
                model = decode_or_reject(contract, encode(_with(wire, path, value)))
                if model is not None:
                    assert_accepted_is_usable(contract, model)
            except Exception as exc:
                raise AssertionError(f"{'.'.join(path)} = {value!r:.60}: {exc!r:.300}") from exc


@pytest.mark.parametrize("number", ["NaN", '"NaN"', "Infinity", '"-Infinity"'])
@pytest.mark.parametrize(
    ("contract", "template"),
    [
        (
            REMINDER_SETTINGS,
            '{"SettingGuid":"%(u)s","BusinessUnitId":"%(u)s","SourceType":"S",'
            '"TriggerType":"ThresholdCondition","TriggerKey":"k","Threshold":{"MetricKey":"m",'
            '"Value":%(n)s,"Comparator":"GreaterThan","FiringPolicy":"OncePerDay"},'
            '"Active":true,"Version":1}',
        ),
        (
            SOURCE_EVENTS,
            '{"SourceType":"S","SourceGuid":"%(u)s","BusinessUnitId":"%(u)s","Version":1,'
            '"OccurredAt":"2026-12-01T09:00:00+00:00","IsActive":true,"Attributes":{"x":%(n)s}}',
        ),
    ],
    ids=["Threshold.Value", "Attributes"],
)
def test_non_finite_number_is_refused_or_survives_re_encoding(
    contract: TopicContract[Any], template: str, number: str
) -> None:
    """A NaN or Infinity that is accepted must come out of to_json as itself: JSON has no
    such numbers, and pydantic writes them as null (which the contract then refuses, or
    reads back as a different value)."""
    raw = (template % {"u": "3f0e6a8e-0000-4000-8000-000000000001", "n": number}).encode()
    model = decode_or_reject(contract, raw)
    if model is not None:
        assert_accepted_is_usable(contract, model)


@pytest.mark.parametrize(
    "contract",
    [c for c in INPUT_CONTRACTS if "occurred_at" in c.model.model_fields],
    ids=lambda c: c.name,
)
@settings(max_examples=100, deadline=None)
@given(
    data=st.data(),
    instant=st.one_of(
        st.datetimes(),
        # Within a day of the edges of the years the contracts accept, and of datetime's.
        *(
            st.datetimes(
                min_value=datetime(y, m, d) - timedelta(days=1),
                max_value=datetime(y, m, d) + timedelta(days=1),
            )
            for y, m, d in [(1900, 1, 1), (9001, 1, 1), (1, 1, 2), (9999, 12, 30)]
        ),
    ),
    minutes=st.integers(-1439, 1439),
)
def test_an_instant_is_judged_by_the_instant_not_by_its_offset(
    contract: TopicContract[Any], data: st.DataObject, instant: datetime, minutes: int
) -> None:
    """The same instant written in UTC and with another offset is accepted by both or by
    neither (a producer's choice of offset must not decide validity)."""
    wire = data.draw(VALID_INPUTS[contract.name](), label="wire")
    as_utc = instant.replace(tzinfo=UTC)
    try:
        written = as_utc.astimezone(timezone(timedelta(minutes=minutes)))
    except OverflowError:
        return  # that offset cannot write this instant at all
    a = decode_or_reject(contract, encode({**wire, "OccurredAt": written.isoformat()}))
    b = decode_or_reject(contract, encode({**wire, "OccurredAt": as_utc.isoformat()}))
    assert (a is None) == (b is None), (written.isoformat(), as_utc.isoformat())
