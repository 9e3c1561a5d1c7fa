"""The Recurring trigger provider (pure): occurrences, one key per occurrence, successors,
execution-time revalidation and invalidation reasons."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time
from typing import Any

from streams.contracts.automation import (
    Recurrence,
    ReminderSettingChanged,
    SourceEntityChanged,
    TriggerType,
)
from streams.domain.automation.recurring import (
    RecurringInvalidation,
    RecurringProvider,
    ReminderRecurringInput,
    as_recurring,
    is_occurrence,
    occurrences_from,
    revalidate_recurring,
    successors,
)
from streams.domain.automation.revalidation import VerdictKind
from streams.domain.automation.rules import ReminderDateInput, input_hash, parse_scheduler_key
from streams.domain.automation.triggers import TriggerInput

SETTING, SOURCE, BU = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)


def setting(**changes: Any) -> ReminderSettingChanged:
    base: dict[str, Any] = {
        "setting_guid": SETTING,
        "business_unit_id": BU,
        "source_type": "Employee",
        "trigger_type": TriggerType.RECURRING,
        "trigger_key": "HireDate",
        "offsets_days": [7, 0],
        "send_time_local": time(9, 0),
        "active": True,
        "version": 1,
    }
    return ReminderSettingChanged(**(base | changes))


def source(anchor: str = "2019-12-10", **changes: Any) -> SourceEntityChanged:
    base: dict[str, Any] = {
        "source_type": "Employee",
        "source_guid": SOURCE,
        "business_unit_id": BU,
        "version": 1,
        "occurred_at": datetime(2026, 1, 1, tzinfo=UTC),
        "is_active": True,
        "attributes": {"HireDate": anchor},
    }
    return SourceEntityChanged(**(base | changes))


def key(occurrence: str, offset: int) -> str:
    return f"reminder:{SETTING}:Employee:{SOURCE}:HireDate:{occurrence}:{offset}"


def evaluate(as_of: datetime, s: ReminderSettingChanged | None = None, zone: str = "UTC") -> Any:
    return RecurringProvider().evaluate(TriggerInput(s or setting(), source(), zone, as_of))


def take(it: Any, n: int) -> list[date]:
    return [d for d, _ in zip(it, range(n), strict=False)]


def test_yearly_occurrences_skip_the_anchor_and_keep_the_last_day_of_february() -> None:
    leap = date(2020, 2, 29)
    got = take(occurrences_from(leap, Recurrence.YEARLY, date(2020, 1, 1)), 5)
    assert got == [
        date(2021, 2, 28),
        date(2022, 2, 28),
        date(2023, 2, 28),
        date(2024, 2, 29),
        date(2025, 2, 28),
    ]
    assert not is_occurrence(leap, Recurrence.YEARLY, leap)  # a hire date is no anniversary
    assert is_occurrence(leap, Recurrence.YEARLY, date(2024, 2, 29))
    assert not is_occurrence(leap, Recurrence.YEARLY, date(2024, 2, 28))


def test_monthly_occurrences_fall_on_the_last_day_of_shorter_months() -> None:
    got = take(occurrences_from(date(2026, 1, 31), Recurrence.MONTHLY, date(2026, 1, 1)), 4)
    assert got == [date(2026, 2, 28), date(2026, 3, 31), date(2026, 4, 30), date(2026, 5, 31)]
    assert is_occurrence(date(2026, 1, 31), Recurrence.MONTHLY, date(2026, 4, 30))
    assert not is_occurrence(date(2026, 1, 31), Recurrence.MONTHLY, date(2026, 4, 29))


def test_the_next_occurrence_per_offset_is_ensured_with_one_key_per_occurrence() -> None:
    result = evaluate(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    by_key = {c.key: c for c in result.ensure}
    assert set(by_key) == {key("2026-12-10", 7), key("2026-12-10", 0)}
    seven = by_key[key("2026-12-10", 7)]
    assert (seven.scheduled_on, seven.scheduled_local_date, seven.trigger_type) == (
        datetime(2026, 12, 3, 9, 0, tzinfo=UTC),
        date(2026, 12, 3),
        TriggerType.RECURRING,
    )
    # The key parses back in the date format; its hash is the Recurring one, never DateBased's.
    back = parse_scheduler_key(seven.key)
    assert isinstance(back, ReminderDateInput) and as_recurring(back) == seven.input
    assert input_hash(back) != seven.input_hash == input_hash(as_recurring(back))


def test_a_passed_reminder_day_moves_that_offset_to_next_year_and_stays_valid() -> None:
    result = evaluate(datetime(2026, 12, 5, 9, 0, tzinfo=UTC))
    assert {c.key for c in result.ensure} == {key("2027-12-10", 7), key("2026-12-10", 0)}
    # The occurrence whose reminder day passed is still valid (an overdue row is not stale).
    assert key("2026-12-10", 7) in result.valid and key("2025-12-10", 0) in result.valid
    # Beyond a year back (reminder day 2025-12-03) and beyond the next one: not valid.
    assert key("2025-12-10", 7) not in result.valid
    assert key("2028-12-10", 7) in result.valid  # the successor of the next one
    assert key("2029-12-10", 7) not in result.valid


def test_the_same_state_gives_the_same_keys_whoever_asks() -> None:
    at = datetime(2026, 6, 1, tzinfo=UTC)
    assert evaluate(at) == evaluate(at)  # event path and reconciliation alike


def test_a_monthly_invoice_day_with_no_offsets_is_reminded_on_the_day() -> None:
    monthly = setting(trigger_key="HireDate", recurrence=Recurrence.MONTHLY, offsets_days=[])
    result = evaluate(datetime(2026, 4, 11, tzinfo=UTC), monthly)
    assert [c.key for c in result.ensure] == [key("2026-05-10", 0)]


def test_in_a_bu_zone_the_send_time_is_local() -> None:
    result = evaluate(datetime(2026, 12, 1, tzinfo=UTC), zone="America/New_York")
    seven = next(c for c in result.ensure if c.key == key("2026-12-10", 7))
    assert seven.scheduled_on == datetime(2026, 12, 3, 14, 0, tzinfo=UTC)


def test_inactive_or_unrelated_states_yield_nothing() -> None:
    at = datetime(2026, 12, 1, tzinfo=UTC)
    for s in (setting(active=False), setting(source_type="Other")):
        assert evaluate(at, s).ensure == ()
    no_anchor = RecurringProvider().evaluate(
        TriggerInput(setting(), source(attributes={}), "UTC", at)
    )
    assert no_anchor.ensure == ()


def test_a_completed_occurrence_has_its_successor() -> None:
    done = ReminderRecurringInput(SETTING, "Employee", SOURCE, "HireDate", date(2026, 12, 10), 7)
    [following] = successors(setting(), source(), "UTC", done)
    assert following.key == key("2027-12-10", 7)
    assert following.scheduled_on == datetime(2027, 12, 3, 9, 0, tzinfo=UTC)
    assert successors(setting(active=False), source(), "UTC", done) == []


def test_revalidation_verdicts() -> None:
    occ = ReminderRecurringInput(SETTING, "Employee", SOURCE, "HireDate", date(2026, 12, 10), 7)
    h = input_hash(occ)
    assert revalidate_recurring(occ, h, setting(), source()).kind is VerdictKind.VALID
    cases = [
        (setting(active=False), source(), "ReminderSettingInactive"),
        (None, source(), "ReminderSettingInactive"),
        (setting(offsets_days=[1]), source(), "ReminderSettingInactive"),
        (setting(trigger_type=TriggerType.DATE_BASED), source(), "ReminderSettingInactive"),
        (setting(), source("2019-12-11"), "SourceNoLongerValid"),
        (setting(), source(is_active=False), "SourceNoLongerValid"),
        (setting(), None, "SourceNoLongerValid"),
    ]
    for s, src, reason in cases:
        v = revalidate_recurring(occ, h, s, src)
        assert (v.kind, v.reason) == (VerdictKind.DEACTIVATE, reason), (s, src)
    held = revalidate_recurring(occ, "e" * 64, setting(), source())
    assert (held.kind, held.reason, held.current_hash) == (VerdictKind.HOLD, "InputHashMismatch", h)


def test_invalidation_reasons_for_stale_recurring_rows() -> None:
    inv = RecurringInvalidation()
    k = key("2026-12-10", 7)
    assert inv.reasons([k], None, True) == {k: "ReminderSettingInactive"}
    assert inv.reasons([k], setting(), False) == {k: "SourceNoLongerValid"}
    assert inv.reasons([k], setting(), True) == {k: "SourceNoLongerValid"}  # its date moved
    assert inv.reasons([k], setting(offsets_days=[1]), True) == {k: "ReminderSettingInactive"}
