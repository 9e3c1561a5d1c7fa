"""Immediate notifications (pure): the key, when a setting gets one, revalidation, reasons."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from typing import Any

from streams.contracts.automation import (
    ReminderSettingChanged,
    SourceEntityChanged,
    TriggerType,
)
from streams.domain.automation.immediate import (
    DateBasedImmediate,
    default_immediate,
    immediate_reason,
    is_immediate_key,
    revalidate_immediate,
)
from streams.domain.automation.keys import ReminderImmediateInput
from streams.domain.automation.revalidation import VerdictKind
from streams.domain.automation.rules import ReminderDateInput, input_hash, parse_scheduler_key
from streams.domain.automation.triggers import TriggerInput

SETTING, SOURCE, BU = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TARGET = date(2026, 12, 31)


def setting(**changes: Any) -> ReminderSettingChanged:
    base: dict[str, Any] = {
        "setting_guid": SETTING,
        "business_unit_id": BU,
        "source_type": "Doc",
        "trigger_type": TriggerType.DATE_BASED,
        "trigger_key": "ExpiresOn",
        "offsets_days": [7],
        "active": True,
        "version": 1,
        "immediate_notification": True,
    }
    return ReminderSettingChanged(**(base | changes))


def source(target: str = TARGET.isoformat(), **changes: Any) -> SourceEntityChanged:
    base: dict[str, Any] = {
        "source_type": "Doc",
        "source_guid": SOURCE,
        "business_unit_id": BU,
        "version": 1,
        "occurred_at": NOW,
        "is_active": True,
        "attributes": {"ExpiresOn": target},
    }
    return SourceEntityChanged(**(base | changes))


def notes(s: ReminderSettingChanged, src: SourceEntityChanged, at: datetime = NOW) -> Any:
    return DateBasedImmediate().notifications(TriggerInput(s, src, "Europe/Berlin", at))


def test_the_immediate_key_is_its_own_and_parses_back() -> None:
    occ = ReminderImmediateInput(SETTING, "Doc", SOURCE, "ExpiresOn", TARGET)
    key = occ.key()
    assert key == f"reminder:{SETTING}:Doc:{SOURCE}:ExpiresOn:2026-12-31:immediate"
    assert parse_scheduler_key(key) == occ and is_immediate_key(key)
    dated = ReminderDateInput(SETTING, "Doc", SOURCE, "ExpiresOn", TARGET, 0)
    assert not is_immediate_key(dated.key()) and input_hash(dated) != input_hash(occ)


def test_a_setting_that_asks_gets_one_due_at_once_per_target_date() -> None:
    [c] = notes(setting(), source())
    assert c.key == f"reminder:{SETTING}:Doc:{SOURCE}:ExpiresOn:2026-12-31:immediate"
    assert (c.scheduled_on, c.scheduled_local_date, c.time_zone_id) == (
        NOW,
        date(2026, 12, 1),
        "Europe/Berlin",
    )
    assert notes(setting(), source(), NOW.replace(hour=10)) != () and (
        notes(setting(), source(), NOW.replace(hour=10))[0].key == c.key
    )  # later passes, same key
    [moved] = notes(setting(), source("2027-01-15"))
    assert moved.key != c.key  # a new occurrence, its own notification


def test_no_immediate_notification_when_not_asked_or_not_needed() -> None:
    assert notes(setting(immediate_notification=False), source()) == ()
    assert notes(setting(), source("2026-11-30")) == ()  # already past in the BU zone
    assert len(notes(setting(), source("2026-12-01"))) == 1  # today still counts
    assert notes(setting(active=False), source()) == ()
    assert notes(setting(), source(is_active=False)) == ()
    assert notes(setting(), source(attributes={})) == ()
    assert set(default_immediate()) == {"DateBased"}


def test_revalidation_and_reasons() -> None:
    occ = ReminderImmediateInput(SETTING, "Doc", SOURCE, "ExpiresOn", TARGET)
    h = input_hash(occ)
    assert revalidate_immediate(occ, h, setting(), source()).kind is VerdictKind.VALID
    for s, src, reason in [
        (setting(immediate_notification=False), source(), "ReminderSettingInactive"),
        (setting(active=False), source(), "ReminderSettingInactive"),
        (setting(trigger_key="Other"), source(), "ReminderSettingInactive"),
        (None, source(), "ReminderSettingInactive"),
        (setting(), source("2027-01-15"), "SourceNoLongerValid"),
        (setting(), source(is_active=False), "SourceNoLongerValid"),
        (setting(), None, "SourceNoLongerValid"),
    ]:
        v = revalidate_immediate(occ, h, s, src)
        assert (v.kind, v.reason) == (VerdictKind.DEACTIVATE, reason), (s, src)
    assert revalidate_immediate(occ, "e" * 64, setting(), source()).kind is VerdictKind.HOLD
    assert immediate_reason(occ, setting(immediate_notification=False), True).value == (
        "ReminderSettingInactive"
    )
    assert immediate_reason(occ, setting(), False).value == "SourceNoLongerValid"
