"""DatabaseClock: a worker runs on the database's time, read over a round trip."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streams.clock import DatabaseClock, ManualClock
from streams.clock_sync import skew_problem

DB = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def fast_local(seconds: float) -> ManualClock:
    """A worker's own clock ``seconds`` ahead of the database's."""
    return ManualClock(DB + timedelta(seconds=seconds))


def test_now_is_the_reading_plus_monotonic_time_whatever_the_local_clock_says() -> None:
    local = fast_local(600)
    clock = DatabaseClock(local)
    sent = local.monotonic()
    local.advance(0.2)  # the round trip; the database answered DB at its middle
    assert clock.observe(DB, sent, local.monotonic(), local.now())
    assert clock.now() == DB + timedelta(seconds=0.1)
    local.advance(30)
    assert clock.now() == DB + timedelta(seconds=30.1)
    assert clock.skew_seconds == pytest.approx(600.1)
    assert skew_problem(clock, 5.0) == "clock 600.1s ahead of the database's (bound 5s)"


def test_a_slow_local_clock_is_behind_and_a_close_one_is_no_problem() -> None:
    slow = DatabaseClock(fast_local(-42))
    slow.observe(DB, 0.0, 0.0, DB - timedelta(seconds=42))
    assert skew_problem(slow, 5.0) == "clock 42.0s behind the database's (bound 5s)"
    close = DatabaseClock(fast_local(1))
    close.observe(DB, 0.0, 0.0, DB + timedelta(seconds=1))
    assert skew_problem(close, 5.0) is None


def test_before_any_reading_it_is_the_local_clock_and_no_problem_is_claimed() -> None:
    local = fast_local(600)
    clock = DatabaseClock(local)
    assert not clock.synced
    assert clock.now() == local.now()
    assert skew_problem(clock, 5.0) is None


def test_time_never_goes_back_when_a_new_reading_lands_behind_the_last_answer() -> None:
    local = fast_local(0)
    clock = DatabaseClock(local)
    clock.observe(DB, 0.0, 0.0, local.now())
    local.advance(10)
    before = clock.now()
    # A reading 0.5 s behind the last one's extrapolation: time holds still, then moves on.
    clock.observe(DB + timedelta(seconds=9.5), 10.0, 10.0, local.now())
    assert clock.now() == before
    local.advance(1)
    assert clock.now() == DB + timedelta(seconds=10.5)


def test_a_reading_with_a_long_round_trip_is_ignored_once_the_clock_has_one() -> None:
    clock = DatabaseClock(fast_local(0), max_round_trip=1.0)
    assert clock.observe(DB, 0.0, 3.0, DB)  # the first reading is taken, however slow
    assert not clock.observe(DB + timedelta(hours=1), 10.0, 12.0, DB)
    assert clock.round_trip_seconds == 3.0


def test_a_reading_without_a_time_zone_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        DatabaseClock().observe(datetime(2026, 12, 1, 9, 0), 0.0, 0.0, DB)
