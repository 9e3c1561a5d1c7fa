"""SchedulerKey formats and InputHash (seed 003): examples and properties."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from datetime import UTC, date, datetime, timedelta, timezone
from uuid import UUID

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from streams.contracts.automation import FiringPolicy
from streams.domain.automation.rules import (
    AutomationInput,
    ReminderDateInput,
    ReminderThresholdInput,
    ReportManualInput,
    ReportScheduledInput,
    SchedulerCandidate,
    input_hash,
    norm_text,
    parse_scheduler_key,
    scheduler_key,
)

SETTING = UUID("11111111-1111-1111-1111-111111111111")
SOURCE = UUID("22222222-2222-2222-2222-222222222222")
SUB = UUID("33333333-3333-3333-3333-333333333333")
RUN = UUID("44444444-4444-4444-4444-444444444444")


def test_the_four_formats_of_the_seed() -> None:
    assert (
        scheduler_key(
            ReminderDateInput(SETTING, "PoliceVetting", SOURCE, "ExpiresOn", date(2026, 12, 1), 30)
        )
        == f"reminder:{SETTING}:PoliceVetting:{SOURCE}:ExpiresOn:2026-12-01:30"
    )
    assert (
        scheduler_key(
            ReminderThresholdInput(
                SETTING,
                "Class",
                SOURCE,
                "Capacity",
                "BookedPercent",
                90.0,
                FiringPolicy.FALSE_TO_TRUE,
                "episode-3",
            )
        )
        == f"reminder:{SETTING}:Class:{SOURCE}:Capacity:threshold:BookedPercent:90:FalseToTrue:episode-3"
    )
    assert (
        scheduler_key(ReportScheduledInput(SUB, datetime(2026, 12, 1, 9, tzinfo=UTC)))
        == f"report-subscription:{SUB}:scheduled:20261201T090000Z"
    )
    assert scheduler_key(ReportManualInput(SUB, RUN)) == f"report-subscription:{SUB}:manual:{RUN}"


def test_input_hash_is_sha256_of_the_documented_canonical_json() -> None:
    inp = ReminderDateInput(SETTING, " PoliceVetting ", SOURCE, "ExpiresOn", date(2026, 12, 1), 30)
    doc = {
        "AutomationType": "Reminder",
        "OffsetDays": 30,
        "SettingGuid": str(SETTING),
        "SourceGuid": str(SOURCE),
        "SourceType": "PoliceVetting",
        "TargetDate": "2026-12-01",
        "TriggerKey": "ExpiresOn",
        "TriggerType": "DateBased",
        "v": 1,
    }
    expected = hashlib.sha256(
        json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    assert input_hash(inp) == expected


def test_a_colon_inside_a_component_cannot_shift_the_format() -> None:
    a = ReminderDateInput(SETTING, "A:B", SOURCE, "C", date(2026, 1, 1), 1)
    b = ReminderDateInput(SETTING, "A", SOURCE, "B:C", date(2026, 1, 1), 1)
    assert scheduler_key(a) != scheduler_key(b)
    assert parse_scheduler_key(scheduler_key(a)) == a
    assert "A%3AB" in scheduler_key(a)


def test_normalization_variants_give_one_key_and_one_hash() -> None:
    nfd = unicodedata.normalize("NFD", "Café")
    base = ReminderThresholdInput(
        SETTING, "Café", SOURCE, "K", "M", 80, FiringPolicy.ONCE_PER_DAY, "2026-01-01"
    )
    variant = ReminderThresholdInput(
        SETTING, f"  {nfd}\t", SOURCE, "K ", " M", 80.0, FiringPolicy.ONCE_PER_DAY, "2026-01-01"
    )
    assert scheduler_key(base) == scheduler_key(variant)
    assert input_hash(base) == input_hash(variant)
    moscow = timezone(timedelta(hours=3))
    a = ReportScheduledInput(SUB, datetime(2026, 12, 1, 9, tzinfo=UTC))
    b = ReportScheduledInput(SUB, datetime(2026, 12, 1, 12, tzinfo=moscow))
    assert (scheduler_key(a), input_hash(a)) == (scheduler_key(b), input_hash(b))


def test_schedule_fields_are_not_part_of_key_or_hash() -> None:
    """A send-time change must update the row in place: same key, same hash."""
    inp = ReminderDateInput(SETTING, "Doc", SOURCE, "ExpiresOn", date(2026, 12, 1), 7)
    nine = SchedulerCandidate(inp, datetime(2026, 11, 24, 9, tzinfo=UTC), date(2026, 11, 24), "UTC")
    ten = SchedulerCandidate(
        inp, datetime(2026, 11, 24, 10, tzinfo=UTC), date(2026, 11, 24), "Europe/Paris"
    )
    assert (nine.key, nine.input_hash) == (ten.key, ten.input_hash)


def test_blank_components_and_overlong_keys_are_refused() -> None:
    with pytest.raises(ValueError):
        scheduler_key(ReminderDateInput(SETTING, "  ", SOURCE, "K", date(2026, 1, 1), 1))
    with pytest.raises(ValueError, match="longer than"):
        SchedulerCandidate(
            ReminderDateInput(SETTING, "x" * 2000, SOURCE, "K", date(2026, 1, 1), 1),
            datetime(2026, 1, 1, tzinfo=UTC),
        )
    with pytest.raises(ValueError, match="timezone-aware"):
        SchedulerCandidate(ReportManualInput(SUB, RUN), datetime(2026, 1, 1))


@pytest.mark.parametrize(
    "key",
    [
        "",
        "reminder:x",
        f"reminder:{SETTING}:T:{SOURCE}:K:2026-13-01:1",
        f"reminder:{SETTING}:T:{SOURCE}:K:threshold:M:80:Sometimes:s",
        f"report-subscription:{SUB}:weekly:{RUN}",
        f"report-subscription:{SUB}:manual:not-a-guid",
    ],
)
def test_parse_refuses_what_is_not_one_of_the_four_formats(key: str) -> None:
    with pytest.raises(ValueError):
        parse_scheduler_key(key)


# --- properties ------------------------------------------------------------------------------

texts = st.text(min_size=1, max_size=40).filter(lambda t: bool(t.strip()))
instants = st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
dates = st.dates(min_value=date(1990, 1, 1), max_value=date(2100, 1, 1))
values = st.floats(allow_nan=False, allow_infinity=False, width=64)

inputs: st.SearchStrategy[AutomationInput] = st.one_of(
    st.builds(
        ReminderDateInput, st.uuids(), texts, st.uuids(), texts, dates, st.integers(-400, 400)
    ),
    st.builds(
        ReminderThresholdInput,
        st.uuids(),
        texts,
        st.uuids(),
        texts,
        texts,
        values,
        st.sampled_from(FiringPolicy),
        texts,
    ),
    st.builds(ReportScheduledInput, st.uuids(), instants),
    st.builds(ReportManualInput, st.uuids(), st.uuids()),
)


def _safe(inp: AutomationInput) -> bool:
    try:
        scheduler_key(inp)
        return True
    except ValueError:
        return False  # a component that normalizes to nothing (e.g. only a format char)


@given(inputs)
def test_same_input_same_key_and_hash_and_the_key_parses_back(inp: AutomationInput) -> None:
    assume(_safe(inp))
    key = scheduler_key(inp)
    assert key == scheduler_key(inp) and input_hash(inp) == input_hash(inp)
    back = parse_scheduler_key(key)
    assert scheduler_key(back) == key
    assert input_hash(back) == input_hash(inp)
    assert len(input_hash(inp)) == 64


@given(inputs, inputs)
def test_different_inputs_never_share_a_key(a: AutomationInput, b: AutomationInput) -> None:
    assume(_safe(a) and _safe(b))
    same_input = type(a) is type(b) and a.fields() == b.fields()
    assert (scheduler_key(a) == scheduler_key(b)) == same_input
    assert (input_hash(a) == input_hash(b)) == same_input


@given(inputs)
def test_keys_hold_no_whitespace_and_only_the_inputs_identifiers(inp: AutomationInput) -> None:
    assume(_safe(inp))
    key = scheduler_key(inp)
    assert not any(ch.isspace() for ch in key)
    assert key.split(":")[0] in {"reminder", "report-subscription"}
    if isinstance(inp, ReminderDateInput | ReminderThresholdInput):
        assert norm_text(inp.source_type) == parse_scheduler_key(key).source_type  # type: ignore[union-attr]
