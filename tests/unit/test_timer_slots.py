"""Slot rules of the timer registry: interval windows, cron fire times (UTC and zoned), keys."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.timers.slots import (
    EPOCH,
    Cadence,
    cron_next,
    cron_slot,
    fanout_key,
    interval_slot,
    min_period,
    next_fire,
    slot_at,
    slot_key,
    slots_between,
)

BERLIN = "Europe/Berlin"
MS = timedelta(milliseconds=1)

instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1), timezones=st.just(UTC)
)
intervals = st.integers(min_value=1, max_value=86_400_000_000).map(
    lambda us: timedelta(microseconds=us)
)


def _utc(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0, us: int = 0) -> datetime:
    return datetime(y, mo, d, h, mi, s, us, tzinfo=UTC)


# -- interval ---------------------------------------------------------------------------------


def test_interval_slot_is_the_start_of_the_epoch_aligned_window() -> None:
    minute = timedelta(minutes=1)
    assert interval_slot(_utc(2025, 1, 6, 12, 0, 59, 999_999), minute) == _utc(2025, 1, 6, 12, 0)
    assert interval_slot(_utc(2025, 1, 6, 12, 1), minute) == _utc(2025, 1, 6, 12, 1)
    half = timedelta(milliseconds=500)
    assert interval_slot(_utc(2025, 1, 6, 12, 0, 0, 700_000), half) == _utc(
        2025, 1, 6, 12, 0, 0, 500_000
    )


def test_interval_slot_ignores_the_zone_the_instant_is_written_in() -> None:
    berlin = datetime(2025, 3, 30, 3, 17, tzinfo=ZoneInfo(BERLIN))
    assert interval_slot(berlin, timedelta(minutes=5)) == _utc(2025, 3, 30, 1, 15)


def test_naive_instants_are_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        interval_slot(datetime(2025, 1, 1), timedelta(seconds=1))
    with pytest.raises(ValueError, match="timezone-aware"):
        cron_slot("* * * * *", datetime(2025, 1, 1))


@given(now=instants, interval=intervals)
def test_interval_slot_contains_now_and_is_aligned(now: datetime, interval: timedelta) -> None:
    slot = interval_slot(now, interval)
    assert slot <= now < slot + interval
    assert (slot - EPOCH) % interval == timedelta(0)
    assert interval_slot(slot, interval) == slot
    assert next_fire(Cadence(interval=interval), now) == slot + interval


@given(now=instants, interval=intervals, skew_us=st.integers(min_value=0, max_value=10**9))
def test_two_workers_in_one_window_compute_the_same_slot(
    now: datetime, interval: timedelta, skew_us: int
) -> None:
    slot = interval_slot(now, interval)
    other = slot + timedelta(microseconds=skew_us % (interval // timedelta(microseconds=1)))
    assert interval_slot(other, interval) == slot


# -- cron: the tick's own fire time, not now() -------------------------------------------------


def test_cron_slot_is_the_fire_time_for_ticks_tens_of_milliseconds_apart() -> None:
    fire = _utc(2025, 1, 6, 12, 0)
    # Two workers whose clocks differ by 50 ms both handle the 12:00 tick.
    assert cron_slot("0 12 * * *", fire + 10 * MS) == fire
    assert cron_slot("0 12 * * *", fire + 60 * MS) == fire
    assert cron_slot("0 12 * * *", fire) == fire


def test_cron_slot_on_either_side_of_the_fire_time_with_tolerance() -> None:
    fire = _utc(2025, 1, 6, 12, 0)
    cadence = Cadence(cron="0 12 * * *")
    early, late = fire - 25 * MS, fire + 25 * MS
    # A tick that fires 25 ms early still belongs to the fire time just ahead of it...
    assert slot_at(cadence, early, tolerance=100 * MS) == fire
    assert slot_at(cadence, late, tolerance=100 * MS) == fire
    # ...whereas without tolerance it would be yesterday's slot: now() is not the slot.
    assert slot_at(cadence, early) == fire - timedelta(days=1)
    assert slot_at(Cadence(interval=timedelta(hours=1)), early, tolerance=100 * MS) == fire


def test_cron_next_is_strictly_after() -> None:
    fire = _utc(2025, 1, 6, 12, 0)
    assert cron_next("0 12 * * *", fire - MS) == fire
    assert cron_next("0 12 * * *", fire) == fire + timedelta(days=1)
    assert cron_next("* * * * * */10", fire) == fire + timedelta(seconds=10)


def test_utc_cron_ignores_daylight_saving_changes() -> None:
    # Europe and the US change clocks on these days; a UTC cron does not care.
    fire = cron_next("0 9 * * *", _utc(2025, 1, 1))
    fires = [fire]
    for _ in range(400):
        fires.append(cron_next("0 9 * * *", fires[-1]))
    assert all(f.hour == 9 and f.minute == 0 for f in fires)
    assert {b - a for a, b in itertools.pairwise(fires)} == {timedelta(days=1)}
    assert cron_slot("0 9 * * *", _utc(2025, 3, 30, 9, 30)) == _utc(2025, 3, 30, 9)
    assert cron_slot("0 9 * * *", _utc(2025, 10, 26, 9, 30)) == _utc(2025, 10, 26, 9)


def test_zoned_cron_keeps_local_wall_time_across_dst() -> None:
    # 09:00 in Berlin: 08:00Z in winter, 07:00Z in summer.
    assert cron_next("0 9 * * *", _utc(2025, 3, 29), BERLIN) == _utc(2025, 3, 29, 8)
    assert cron_next("0 9 * * *", _utc(2025, 3, 29, 8), BERLIN) == _utc(2025, 3, 30, 7)
    assert cron_slot("0 9 * * *", _utc(2025, 3, 30, 7, 30), BERLIN) == _utc(2025, 3, 30, 7)
    assert cron_next("0 9 * * *", _utc(2025, 10, 25, 7), BERLIN) == _utc(2025, 10, 26, 8)
    assert cron_slot("0 9 * * *", _utc(2025, 10, 26, 7, 59), BERLIN) == _utc(2025, 10, 25, 7)
    new_york = "America/New_York"
    assert cron_next("0 9 * * *", _utc(2025, 3, 8), new_york) == _utc(2025, 3, 8, 14)
    assert cron_next("0 9 * * *", _utc(2025, 3, 8, 14), new_york) == _utc(2025, 3, 9, 13)


def test_zoned_cron_in_the_spring_gap_fires_once_when_the_gap_ends() -> None:
    # 02:30 does not exist in Berlin on 2025-03-30; the job runs at 03:00 CEST (01:00Z).
    assert cron_next("30 2 * * *", _utc(2025, 3, 29, 2), BERLIN) == _utc(2025, 3, 30, 1)
    assert cron_next("30 2 * * *", _utc(2025, 3, 30, 1), BERLIN) == _utc(2025, 3, 31, 0, 30)
    # */30 in the gap collapses into the single instant the gap ends.
    got = slots_between(
        Cadence(cron="*/30 * * * *", timezone=BERLIN), _utc(2025, 3, 30, 0), _utc(2025, 3, 30, 2)
    )
    assert got.latest == (
        _utc(2025, 3, 30, 0, 30),
        _utc(2025, 3, 30, 1, 0),
        _utc(2025, 3, 30, 1, 30),
        _utc(2025, 3, 30, 2, 0),
    )


def test_zoned_cron_in_the_repeated_autumn_hour_fires_once() -> None:
    # 02:30 happens twice in Berlin on 2025-10-26 (00:30Z and 01:30Z); it fires at the first.
    assert cron_next("30 2 * * *", _utc(2025, 10, 25, 1), BERLIN) == _utc(2025, 10, 26, 0, 30)
    assert cron_next("30 2 * * *", _utc(2025, 10, 26, 0, 30), BERLIN) == _utc(2025, 10, 27, 1, 30)
    assert cron_slot("30 2 * * *", _utc(2025, 10, 26, 1, 45), BERLIN) == _utc(2025, 10, 26, 0, 30)


ZONES = [None, BERLIN, "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
EXPRS = ["*/15 * * * *", "30 2 * * *", "0 9 * * 1-5", "0 0 1 * *", "* * * * * */20"]


@settings(max_examples=300, deadline=None)
@given(
    now=st.datetimes(
        min_value=datetime(2024, 1, 1), max_value=datetime(2027, 1, 1), timezones=st.just(UTC)
    ),
    zone=st.sampled_from(ZONES),
    expr=st.sampled_from(EXPRS),
)
def test_cron_slot_and_next_bracket_now(now: datetime, zone: str | None, expr: str) -> None:
    slot = cron_slot(expr, now, zone)
    following = cron_next(expr, slot, zone)
    assert slot <= now < following
    assert cron_next(expr, now, zone) == following
    # A fire time is its own slot: every worker that handles it computes the same instant.
    assert cron_slot(expr, following, zone) == following
    assert cron_slot(expr, following + 50 * MS, zone) == following


# -- spans, periods, keys ----------------------------------------------------------------------


def test_slots_between_counts_and_keeps_the_latest() -> None:
    minute = Cadence(interval=timedelta(minutes=1))
    start = _utc(2025, 1, 6, 12, 0)
    got = slots_between(minute, start, start + timedelta(minutes=5, seconds=30), keep=3)
    assert got.count == 5
    assert got.latest == tuple(start + timedelta(minutes=k) for k in (3, 4, 5))
    assert slots_between(minute, start, start).count == 0
    assert slots_between(minute, start, start + timedelta(seconds=59)).count == 0
    assert slots_between(minute, start - MS, start).latest == (start,)


def test_cron_slots_between_stops_at_the_cap_but_still_knows_the_tail() -> None:
    every_minute = Cadence(cron="* * * * *")
    start = _utc(2025, 1, 6, 12, 0)
    got = slots_between(every_minute, start, start + timedelta(hours=1), keep=2, cap=10)
    assert got.capped
    assert got.count == 10
    assert got.latest == (_utc(2025, 1, 6, 12, 59), _utc(2025, 1, 6, 13, 0))
    exact = slots_between(every_minute, start, start + timedelta(hours=1), keep=2)
    assert (exact.count, exact.capped) == (60, False)


def test_min_period() -> None:
    assert min_period(Cadence(interval=timedelta(seconds=7)), _utc(2025, 1, 1)) == timedelta(
        seconds=7
    )
    assert min_period(Cadence(cron="0,10 * * * *"), _utc(2025, 1, 1)) == timedelta(minutes=10)


def test_keys_are_iso_utc_and_identical_for_every_worker() -> None:
    slot = _utc(2025, 1, 6, 12, 0)
    assert slot_key("calendar-dispatch", slot) == "calendar-dispatch:2025-01-06T12:00:00Z"
    same_instant = slot.astimezone(ZoneInfo(BERLIN))
    assert slot_key("calendar-dispatch", same_instant) == slot_key("calendar-dispatch", slot)
    assert fanout_key("doc-expiry", 42, slot) == "doc-expiry:42:2025-01-06T12:00:00Z"
    assert slot_key("x", slot + 500 * MS) == "x:2025-01-06T12:00:00.500000Z"
    with pytest.raises(ValueError):
        fanout_key("doc-expiry", "a:b", slot)


def test_cadence_needs_exactly_one_rule() -> None:
    with pytest.raises(ValueError):
        Cadence()
    with pytest.raises(ValueError):
        Cadence(interval=timedelta(seconds=1), cron="* * * * *")
    with pytest.raises(ValueError):
        Cadence(interval=timedelta(0))
