"""The one DST rule and the one cron implementation (issue 22 items 1-2): the timer registry,
DateBased reminders and report subscriptions map a local time to the same instant, and a
report cron has the standard semantics (ranges, steps, names, day-of-month OR day-of-week)."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.contracts.automation import ReminderSettingChanged, SourceEntityChanged, TriggerType
from streams.domain.automation.reports import check_cron, period_starts
from streams.domain.automation.triggers import DateBasedProvider, TriggerInput
from streams.domain.local_time import local_to_utc, wall_to_utc
from streams.timers.slots import Cadence, cron_next, slots_between

BU = uuid.UUID("00000000-0000-0000-0000-0000000000b1")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


# (zone, local day, local time, the instant the product rule gives, what the local clock
# reads then). Gap → the instant the gap ends; overlap → the first occurrence.
TRANSITIONS = [
    # Berlin +1 → +2 at 02:00 (30 Mar 2026: 29 Mar), 60-minute gap.
    ("Europe/Berlin", date(2026, 3, 29), time(2, 30), utc(2026, 3, 29, 1, 0), time(3, 0)),
    # Berlin +2 → +1 at 03:00: 02:30 happens at 00:30Z (CEST) and 01:30Z (CET).
    ("Europe/Berlin", date(2026, 10, 25), time(2, 30), utc(2026, 10, 25, 0, 30), time(2, 30)),
    # New York -5 → -4 at 02:00.
    ("America/New_York", date(2026, 3, 8), time(2, 30), utc(2026, 3, 8, 7, 0), time(3, 0)),
    # New York -4 → -5 at 02:00: 01:30 happens at 05:30Z (EDT) and 06:30Z (EST).
    ("America/New_York", date(2026, 11, 1), time(1, 30), utc(2026, 11, 1, 5, 30), time(1, 30)),
    # Lord Howe +10:30 → +11 at 02:00 (a 30-minute gap): 02:15 → 02:30.
    ("Australia/Lord_Howe", date(2026, 10, 4), time(2, 15), utc(2026, 10, 3, 15, 30), time(2, 30)),
    # Lord Howe +11 → +10:30 at 02:00: 01:45 happens at 14:45Z (+11) and 15:15Z (+10:30).
    ("Australia/Lord_Howe", date(2026, 4, 5), time(1, 45), utc(2026, 4, 4, 14, 45), time(1, 45)),
]


@pytest.mark.parametrize(("zone", "day", "at", "instant", "reads"), TRANSITIONS)
def test_every_path_maps_a_transition_time_to_the_same_instant(
    zone: str, day: date, at: time, instant: datetime, reads: time
) -> None:
    assert local_to_utc(day, at, zone) == instant
    assert instant.astimezone(ZoneInfo(zone)).time() == reads
    # The timer registry's cron.
    cron = f"{at.minute} {at.hour} * * *"
    assert cron_next(cron, instant - timedelta(hours=20), zone) == instant
    # A report subscription's cron: one run that day, at the same instant.
    runs = period_starts(
        None, cron, zone, instant - timedelta(hours=20), instant + timedelta(hours=1)
    )
    assert runs == [instant]
    # A DateBased reminder sent at that local time (offset 0: the target day itself).
    setting = ReminderSettingChanged(
        setting_guid=uuid.uuid4(),
        business_unit_id=BU,
        source_type="PoliceVetting",
        trigger_type=TriggerType.DATE_BASED,
        trigger_key="ExpiryDate",
        offsets_days=[0],
        send_time_local=at,
        active=True,
        version=1,
    )
    src = SourceEntityChanged(
        source_type="PoliceVetting",
        source_guid=uuid.uuid4(),
        business_unit_id=BU,
        is_active=True,
        attributes={"ExpiryDate": day.isoformat()},
        version=1,
        occurred_at=instant - timedelta(days=3),
    )
    [candidate] = (
        DateBasedProvider()
        .evaluate(TriggerInput(setting, src, zone, instant - timedelta(days=3)))
        .ensure
    )
    assert (candidate.scheduled_on, candidate.scheduled_local_date) == (instant, day)


def test_a_cron_inside_the_gap_collapses_into_the_one_instant_the_gap_ends() -> None:
    # */15 across Lord Howe's 30-minute gap: 02:00 and 02:15 do not exist; both are 02:30.
    start = utc(2026, 10, 3, 15, 0)  # 01:30 +10:30
    runs = period_starts(None, "*/15 * * * *", "Australia/Lord_Howe", start, utc(2026, 10, 3, 16))
    assert runs == [
        utc(2026, 10, 3, 15, 0),
        utc(2026, 10, 3, 15, 15),
        utc(2026, 10, 3, 15, 30),  # 02:00, 02:15 and 02:30 local: one run
        utc(2026, 10, 3, 15, 45),
    ]


def test_the_repeated_hour_runs_once() -> None:
    # New York 01:00-02:00 happens twice on 2026-11-01; an hourly cron runs at 01:00 once.
    runs = period_starts(
        None, "0 * * * *", "America/New_York", utc(2026, 11, 1, 4), utc(2026, 11, 1, 8, 1)
    )
    local = [r.astimezone(ZoneInfo("America/New_York")).strftime("%H:%M%z") for r in runs]
    assert local == ["00:00-0400", "01:00-0400", "02:00-0500", "03:00-0500"]


ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
walls = st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2028, 1, 1))


@settings(max_examples=400, deadline=None)
@given(a=walls, b=walls, zone=st.sampled_from(ZONES))
def test_the_rule_is_monotonic_and_exact_outside_gaps(a: datetime, b: datetime, zone: str) -> None:
    a, b = sorted((a.replace(microsecond=0), b.replace(microsecond=0)))
    ta, tb = wall_to_utc(a, zone), wall_to_utc(b, zone)
    assert ta <= tb  # a later local time is never an earlier instant
    back = ta.astimezone(ZoneInfo(zone)).replace(tzinfo=None)
    if back != a:
        # a is in a gap: the instant is the gap's end, the first local time after a.
        assert back > a
        before = ta - timedelta(seconds=1)
        assert (
            before.astimezone(ZoneInfo(zone)).utcoffset()
            != ta.astimezone(ZoneInfo(zone)).utcoffset()
        )
    else:
        # An overlap reads its first occurrence: one second earlier is not the same wall.
        assert all(
            (ta - k).astimezone(ZoneInfo(zone)).replace(tzinfo=None) != a
            for k in (timedelta(minutes=30), timedelta(hours=1))
        )


# --- report crons: the standard semantics -----------------------------------------------------


def runs_local(cron: str, zone: str, start: datetime, days: int) -> list[str]:
    return [
        r.astimezone(ZoneInfo(zone)).strftime("%a %Y-%m-%d %H:%M")
        for r in period_starts(None, cron, zone, start, start + timedelta(days=days))
    ]


def test_weekday_range() -> None:
    got = runs_local("0 9 * * 1-5", "Europe/Berlin", utc(2026, 6, 1), 7)
    assert got == [
        "Mon 2026-06-01 09:00",
        "Tue 2026-06-02 09:00",
        "Wed 2026-06-03 09:00",
        "Thu 2026-06-04 09:00",
        "Fri 2026-06-05 09:00",
    ]


def test_day_of_month_or_day_of_week() -> None:
    # Both restricted: the 1st OR any Monday (June 2026 starts on a Monday).
    got = runs_local("0 9 1 * 1", "UTC", utc(2026, 6, 1), 30)
    assert got == [
        "Mon 2026-06-01 09:00",
        "Mon 2026-06-08 09:00",
        "Mon 2026-06-15 09:00",
        "Mon 2026-06-22 09:00",
        "Mon 2026-06-29 09:00",
    ]
    # The timer registry reads the same cron the same way (one implementation).
    registry = slots_between(Cadence(cron="0 9 1 * 1"), utc(2026, 6, 1), utc(2026, 7, 1))
    assert registry.count == 5
    got = runs_local("0 9 13 * 5", "UTC", utc(2026, 2, 1), 28)
    assert got == [
        "Fri 2026-02-06 09:00",
        "Fri 2026-02-13 09:00",  # the 13th and a Friday: once
        "Fri 2026-02-20 09:00",
        "Fri 2026-02-27 09:00",
    ]


def test_steps() -> None:
    runs = period_starts(None, "*/15 * * * *", "Asia/Kolkata", utc(2026, 6, 1), utc(2026, 6, 2))
    assert len(runs) == 96
    assert {b - a for a, b in itertools.pairwise(runs)} == {timedelta(minutes=15)}
    assert runs_local("0 8-18/5 * * *", "UTC", utc(2026, 6, 1), 1) == [
        "Mon 2026-06-01 08:00",
        "Mon 2026-06-01 13:00",
        "Mon 2026-06-01 18:00",
    ]


def test_month_ends_without_l() -> None:
    # The 31st fires only in months that have one; 28-31 is every month's last days.
    assert runs_local("0 9 31 * *", "UTC", utc(2026, 1, 1), 62) == ["Sat 2026-01-31 09:00"]
    assert runs_local("0 9 30,31 * *", "UTC", utc(2026, 2, 1), 60) == [
        "Mon 2026-03-30 09:00",
        "Tue 2026-03-31 09:00",
    ]
    assert runs_local("0 9 28-31 2 *", "UTC", utc(2026, 2, 1), 30) == ["Sat 2026-02-28 09:00"]
    assert runs_local("0 9 29 2 *", "UTC", utc(2028, 2, 1), 30) == ["Tue 2028-02-29 09:00"]
    assert runs_local("0 9 29 2 *", "UTC", utc(2027, 2, 1), 30) == []


@pytest.mark.parametrize("dow", ["0", "7", "SUN", "sun", "6-7", "0,6"])
def test_sunday_is_0_and_7(dow: str) -> None:
    got = runs_local(f"0 9 * * {dow}", "UTC", utc(2026, 6, 1), 14)
    sundays = ["Sun 2026-06-07 09:00", "Sun 2026-06-14 09:00"]
    if dow in {"6-7", "0,6"}:
        assert got == ["Sat 2026-06-06 09:00", *sundays[:1], "Sat 2026-06-13 09:00", sundays[1]]
    else:
        assert got == sundays


def test_names() -> None:
    assert runs_local("30 7 * JAN MON-FRI", "UTC", utc(2026, 12, 30), 6) == [
        "Fri 2027-01-01 07:30",
        "Mon 2027-01-04 07:30",
    ]


@pytest.mark.parametrize(
    "bad",
    [
        "* * *",
        "61 * * * *",
        "x * * * *",
        "0 9 L * *",
        "0 9 * * 5L",
        "0 9 15W * *",
        "0 9 * * 1#2",
        "0 9 ? * 1",
        "@daily",
        "0 0 9 * * *",
    ],
)
def test_a_non_standard_cron_is_refused_naming_the_cron(bad: str) -> None:
    with pytest.raises(ValueError, match="cron"):
        check_cron(bad)
    with pytest.raises(ValueError, match="cron"):
        period_starts(None, bad, "UTC", utc(2026, 6, 1), utc(2026, 6, 2))


EXPRS = ["*/15 * * * *", "30 2 * * *", "0 9 * * 1-5", "0 9 1 * 1", "15 1,2,3 * * 0", "0 0 31 * *"]


@settings(max_examples=150, deadline=None)
@given(
    start=st.datetimes(
        min_value=datetime(2025, 1, 1), max_value=datetime(2027, 1, 1), timezones=st.just(UTC)
    ),
    zone=st.sampled_from(ZONES),
    expr=st.sampled_from(EXPRS),
)
def test_report_runs_are_the_registry_slots(start: datetime, zone: str, expr: str) -> None:
    """One cron implementation: a subscription's runs in [start, end) are exactly the
    registry's slots of the same cron and zone."""
    end = start + timedelta(days=3)
    slots = slots_between(
        Cadence(cron=expr, timezone=zone),
        start - timedelta(microseconds=1),
        end - timedelta(microseconds=1),
        keep=10_000,
    )
    assert period_starts(None, expr, zone, start, end) == list(slots.latest)
