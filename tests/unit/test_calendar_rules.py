"""Pure calendar rules: wanted reminders, what may be inserted, identity, fingerprint."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID, uuid5

from hypothesis import given
from hypothesis import strategies as st

from devkit.messages.factories import T0, calendar_event, parsed
from streams.domain.calendar import (
    REMINDER_NAMESPACE,
    fingerprint,
    insertable,
    newest_per_event,
    reminder_id,
    wanted_reminders,
)

START = T0 + timedelta(hours=2)


def test_one_reminder_per_distinct_offset_due_at_start_minus_offset() -> None:
    e = parsed(calendar_event(StartAt=START, ReminderOffsetsMinutes=[15, 60, 15, 0]))
    slots = wanted_reminders(e)
    assert [(s.offset_minutes, s.due_at) for s in slots] == [
        (0, START),
        (15, START - timedelta(minutes=15)),
        (60, START - timedelta(minutes=60)),
    ]


def test_closed_events_want_no_reminders() -> None:
    for status in ("Cancelled", "Completed"):
        assert wanted_reminders(parsed(calendar_event(Status=status))) == []
    assert len(wanted_reminders(parsed(calendar_event(Status="InProgress")))) == 2


def test_only_reminders_not_yet_due_at_the_change_are_insertable() -> None:
    e = parsed(
        calendar_event(StartAt=T0 + timedelta(minutes=30), ReminderOffsetsMinutes=[10, 30, 45])
    )
    assert [s.offset_minutes for s in insertable(wanted_reminders(e), T0)] == [10, 30]


def test_reminder_id_is_stable_and_distinguishes_due_time() -> None:
    e = parsed(calendar_event())
    a = reminder_id(e.event_id, 15, START)
    assert a == reminder_id(e.event_id, 15, START.astimezone(UTC))
    assert a != reminder_id(e.event_id, 15, START + timedelta(minutes=1))
    assert a != reminder_id(e.event_id, 16, START)


@given(
    st.uuids(),
    st.integers(min_value=0, max_value=40_320),
    st.datetimes(datetime(2000, 1, 1), datetime(2100, 1, 1), timezones=st.timezones()),
)
def test_reminder_id_is_the_standard_uuid5_of_event_offset_and_utc_due(
    event_id: UUID, offset: int, due: datetime
) -> None:
    text = f"{event_id}:{offset}:{due.astimezone(UTC).isoformat()}"
    assert reminder_id(event_id, offset, due) == uuid5(REMINDER_NAMESPACE, text)


@given(st.lists(st.integers(min_value=0, max_value=40_320), max_size=10))
def test_reminder_ids_are_unique_per_event(offsets: list[int]) -> None:
    e = parsed(calendar_event(ReminderOffsetsMinutes=offsets))
    ids = [s.reminder_id for s in wanted_reminders(e)]
    assert len(ids) == len(set(ids)) == len(set(offsets))


def test_fingerprint_ignores_version_and_occurrence_but_not_state() -> None:
    base = calendar_event()
    fp = fingerprint(parsed(base))
    assert fp == fingerprint(
        parsed({**base, "Version": 9, "OccurredAt": "2030-01-01T00:00:00+00:00"})
    )
    assert fp == fingerprint(parsed({**base, "ReminderOffsetsMinutes": [15, 60, 60]}))
    for change in (
        {"Kind": "Call"},
        {"Status": "Cancelled"},
        {"ReminderOffsetsMinutes": [15]},
        {"StartAt": "2026-12-01T12:00:00+00:00"},
        {"TimeZone": "UTC"},
    ):
        assert fingerprint(parsed({**base, **change})) != fp, change


def test_newest_per_event_keeps_highest_version() -> None:
    a = calendar_event(Version=1)
    b = calendar_event()
    batch = [parsed(a), parsed({**a, "Version": 3}), parsed(b), parsed({**a, "Version": 2})]
    newest = {e.event_id: e.version for e in newest_per_event(batch)}
    assert newest == {parsed(a).event_id: 3, parsed(b).event_id: 1}


def test_instants_keep_their_offset_on_the_wire() -> None:
    e = parsed(calendar_event(StartAt="2026-12-01T12:00:00+03:00"))
    assert e.start_at == datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    assert '"StartAt":"2026-12-01T12:00:00+03:00"' in e.to_json().decode()


def test_identity_depends_on_the_instant_not_on_how_its_offset_was_written() -> None:
    base = calendar_event(StartAt="2026-12-01T10:00:00Z")
    same_instant = {**base, "StartAt": "2026-12-01T11:00:00+01:00", "Version": 2}
    a, b = parsed(base), parsed(same_instant)
    assert [s.reminder_id for s in wanted_reminders(a)] == [
        s.reminder_id for s in wanted_reminders(b)
    ]
    assert fingerprint(a) == fingerprint(b)
    # Identities written before this rule (UTC inputs) are unchanged.
    due = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    assert reminder_id(a.event_id, 0, due) == uuid5(
        REMINDER_NAMESPACE, f"{a.event_id}:0:2026-12-01T10:00:00+00:00"
    )
    # and materialization uses exactly that identity
    assert [s.reminder_id for s in wanted_reminders(a)] == [
        reminder_id(a.event_id, s.offset_minutes, s.due_at) for s in wanted_reminders(a)
    ]


@given(st.integers(min_value=-23 * 60, max_value=23 * 60))
def test_reminder_id_is_the_same_in_every_offset(minutes: int) -> None:
    e = parsed(calendar_event())
    zone = timezone(timedelta(minutes=minutes))
    assert reminder_id(e.event_id, 15, START) == reminder_id(e.event_id, 15, START.astimezone(zone))
