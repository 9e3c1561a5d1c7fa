"""Lane cool-down: pure, clock-driven."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streams.outbox.lanes import LaneCooldown


def test_a_refused_lane_cools_down_then_is_probed_until_it_goes_through() -> None:
    lanes = LaneCooldown(max_backoff=30)
    lanes.track([1, 2], refused={1}, failed={1}, now=100.0)
    assert lanes.paused(100.1) == [1] and lanes.paused(100.25) == []
    assert lanes.probing([1, 2]) == {1}
    lanes.track([1], refused={1}, failed={1}, now=101.0)  # the probe was refused again
    assert lanes.paused(101.4) == [1] and lanes.paused(101.5) == []
    lanes.track([1], refused=set(), failed=set(), now=102.0)  # the probe went through
    assert lanes.probing([1, 2]) == set() and lanes.paused(102.0) == []


def test_a_lane_held_back_by_a_failed_producer_keeps_its_state() -> None:
    lanes = LaneCooldown(max_backoff=30)
    lanes.track([3], refused={3}, failed={3}, now=0.0)
    lanes.track([3], refused=set(), failed={3}, now=1.0)
    assert lanes.probing([3]) == {3}


@given(st.integers(min_value=1, max_value=10_000))
def test_backoff_doubles_and_is_capped(attempt: int) -> None:
    lanes = LaneCooldown(max_backoff=30)
    assert 0.25 <= lanes.backoff(attempt) <= 30
    assert lanes.backoff(attempt + 1) >= lanes.backoff(attempt)
