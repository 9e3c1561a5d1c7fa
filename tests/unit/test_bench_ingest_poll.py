"""The ingest bench counts the stored rows rarely while far from the end, often near it."""

from __future__ import annotations

from bench.ingest import POLL_MAX, POLL_MIN, poll_interval


def test_before_a_rate_is_known_it_polls_at_the_shortest_interval() -> None:
    assert poll_interval(None, (1.0, 0), 50_000) == POLL_MIN
    assert poll_interval((1.0, 100), (1.0, 100), 50_000) == POLL_MIN


def test_far_from_the_end_it_waits_longest_and_near_it_shortest() -> None:
    # 1,000 events/s seen so far.
    first = (10.0, 1_000)
    assert poll_interval(first, (11.0, 2_000), 50_000) == POLL_MAX  # 48 s to go
    assert poll_interval(first, (11.0, 2_000), 3_000) == 0.2  # 1 s to go: a fifth of it
    assert poll_interval(first, (11.0, 2_000), 2_100) == POLL_MIN  # 0.1 s to go
