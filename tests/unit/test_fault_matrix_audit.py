"""The fault matrix's judge, without I/O: the effects auditor's counts and the expected
effects the document-expiry and automation loads compute from acknowledged input."""

from __future__ import annotations

import uuid
from collections.abc import Hashable
from datetime import UTC, date, datetime, timedelta

import pytest

from devkit.loads.calendar_load import Acked
from devkit.loads.reminder_audit import (
    Effect,
    FaultWindow,
    audit_effects,
    format_matrix,
    matrix_rows,
)
from devkit.loads.slice_loads import AutomationLoad, ExpiryLoad, one_utc_day, person_document

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def effect(key: Hashable, outbox_id: str | None, seconds: float = 0) -> Effect:
    return Effect(key, outbox_id, T0 + timedelta(seconds=seconds), 0, int(seconds))


def test_a_republished_outbox_record_is_not_a_doubled_effect_but_a_second_record_is() -> None:
    found = [effect("a", "1"), effect("a", "1", 1), effect("b", "2"), effect("b", "3", 2)]
    result = audit_effects(found, {"a": T0, "b": T0, "c": T0}, {})
    assert result.published == 2
    assert result.republished == 1
    assert result.doubled == ["b"]
    assert result.missing == ["c"]
    assert result.failed


def test_an_effect_no_newest_state_wants_is_wrong_with_its_reason() -> None:
    result = audit_effects([effect("old", "7")], {}, {"old": "superseded"})
    assert result.wrong == {"old": "superseded"}
    assert result.failed


def test_an_effect_without_an_outbox_id_is_doubled() -> None:
    assert audit_effects([effect("a", None)], {"a": T0}, {}).doubled == ["a"]


def test_matrix_rows_count_an_effect_under_each_fault_in_force_during_its_exposure() -> None:
    faults = [
        FaultWindow("broker", T0, T0 + timedelta(seconds=10)),
        FaultWindow("postgres", T0 + timedelta(seconds=100), T0 + timedelta(seconds=110)),
    ]
    found = [effect("a", "1"), effect("a", "1", 3), effect("late", "2", 200)]
    result = audit_effects(found, {"a": T0, "b": T0}, {})
    spans = {
        "a": [(T0 - timedelta(seconds=30), T0 - timedelta(seconds=20)), (T0, T0)],
        "b": [
            (T0 + timedelta(seconds=20), T0 + timedelta(seconds=30)),
            (T0 + timedelta(seconds=105),) * 2,
        ],
    }
    rows = matrix_rows("s", result, spans, faults, timedelta(seconds=5))
    by_fault = {r[1]: r[2:] for r in rows}
    # expected, published, missing, doubled, wrong, re-published (a's record twice)
    assert by_fault["broker"] == (1, 1, 0, 0, 0, 1)  # b's inputs and due time miss the broker
    assert by_fault["postgres"] == (1, 0, 1, 0, 0, 0)
    assert by_fault["no fault"] == (0, 0, 0, 0, 1, 0)  # "late" is wrong, first seen at T0+200
    assert by_fault["all"] == (2, 1, 1, 0, 1, 1)
    head = format_matrix(rows).splitlines()[0].split()
    assert head[2:] == ["expected", "published", "missing", "doubled", "wrong", "re-published"]


def acked(msg: dict[str, object], at: datetime = T0) -> Acked:
    return Acked(dict(msg), at, "test")


def test_expiry_expectation_does_not_remind_again_after_archived_and_active_again() -> None:
    load = ExpiryLoad(seed=1, first_day=date(2026, 11, 20), days=3, owners=0)
    doc = person_document(
        document_id=str(uuid.uuid4()),
        owner=str(uuid.uuid4()),
        person=str(uuid.uuid4()),
        expires=date(2026, 11, 21),
        version=1,
    )
    load.acked.append(acked(doc))
    load.snapshot(0)  # DaysLeft 1: 30, 7 and 1 crossed, t* = 1
    load.acked.append(acked({**doc, "Version": 2, "Status": "Archived"}))
    load.snapshot(1)  # archived: out of the scan
    load.acked.append(acked({**doc, "Version": 3}))
    load.acked.append(acked({**doc, "Version": 2, "Status": "Archived"}))  # a stale replay
    load.snapshot(2)  # active again, DaysLeft -1: 0 crossed and not marked, t* = 0
    assert load.expected([0, 1, 2]) == {(doc["DocumentId"], 1): 0, (doc["DocumentId"], 0): 2}
    # A day that does not run leaves its threshold to the next run's t* only.
    assert load.expected([0, 2]) == {(doc["DocumentId"], 1): 0, (doc["DocumentId"], 0): 2}
    assert load.expected([2]) == {(doc["DocumentId"], 0): 2}


def test_automation_expectation_follows_the_newest_state_and_forbids_what_it_removed() -> None:
    # A fixed instant: on the wall clock, after 23:00 UTC the second send time falls on the
    # next day and the row it wants is due at once (this failed at 23:35 UTC).
    now = T0
    load = AutomationLoad(
        seed=3,
        send_at=(now + timedelta(minutes=5), now + timedelta(hours=1)),
        clock=lambda: now,
    )
    date_setting = load.settings[0]
    guid = uuid.uuid4()
    load.kinds[guid] = "date-revert"
    first = load.message("create", guid, 1)
    moved = load.message("date-revert:1", guid, 2)
    back = load.message("date-revert:2", guid, 3)
    assert first and moved and back
    load.acked_sources += [acked(first, now), acked(moved, now), acked(back, now)]
    until = now + timedelta(minutes=10)
    expected, forbidden, not_due = load.expected(until)
    today, tomorrow = now.date(), now.date() + timedelta(days=1)
    prefix = f"reminder:{date_setting.setting_guid}:Booking:{guid}"
    assert f"{prefix}:ExpiresOn:{today.isoformat()}:0" in expected
    assert forbidden[f"{prefix}:ExpiresOn:{tomorrow.isoformat()}:0"] == "superseded or deactivated"
    assert not_due == 1  # the second setting's row comes due after ``until``
    assert sum(":threshold:" in k for k in expected) == 1  # Booked 95 >= 90, once per source
    # Deactivated for good: nothing of it may be dispatched.
    gone = uuid.uuid4()
    load.kinds[gone] = "deactivate"
    a, b = load.message("create", gone, 1), load.message("deactivate:1", gone, 2)
    assert a and b and b["IsActive"] is False
    load.acked_sources += [acked(a, now), acked(b, now)]
    expected2, forbidden2, _ = load.expected(until)
    assert set(expected2) == set(expected)
    assert any(str(gone) in k for k in forbidden2)


def test_an_automation_load_started_just_before_midnight_wants_its_rows_after_it() -> None:
    # Started at 23:58 UTC: the send instants (75 s and 150 s on) straddle midnight, so both
    # move past it; the sources' ExpiresOn is their day, not the clock's (a day early, every
    # DateBased row would be due at once and dispatched before the changes that remove it).
    now = datetime(2026, 12, 2, 23, 58, tzinfo=UTC)
    send_at = one_utc_day(now + timedelta(seconds=75), now + timedelta(seconds=150))
    assert [t.date() for t in send_at] == [date(2026, 12, 3)] * 2
    assert send_at[1] - send_at[0] == timedelta(seconds=75)
    assert send_at[0] > now + timedelta(seconds=75)
    load = AutomationLoad(seed=5, send_at=send_at, clock=lambda: now)
    guid = uuid.uuid4()
    load.kinds[guid] = "plain"
    first = load.message("create", guid, 1)
    assert first is not None and first["Attributes"]["ExpiresOn"] == "2026-12-03"
    load.acked_sources.append(acked(first, now))
    expected, forbidden, not_due = load.expected(now + timedelta(seconds=30))
    assert not any(":ExpiresOn:" in k for k in expected)
    assert not_due == 2  # one row per DateBased setting, due at its send instant
    assert set(forbidden.values()) == {"not due yet"}
    later, _, _ = load.expected(send_at[1])
    assert sorted(on for k, on in later.items() if ":ExpiresOn:" in k) == list(send_at)


def test_an_automation_load_refuses_send_instants_on_two_days() -> None:
    late = datetime(2026, 12, 2, 23, 59, tzinfo=UTC)
    with pytest.raises(ValueError, match="one UTC day"):
        AutomationLoad(seed=1, send_at=(late, late + timedelta(minutes=2)))
    assert one_utc_day(T0, T0 + timedelta(hours=1)) == (T0, T0 + timedelta(hours=1))
