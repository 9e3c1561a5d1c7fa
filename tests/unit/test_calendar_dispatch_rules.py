"""Pure rules of the calendar dispatcher: the poison backoff and where a run wakes next."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from db.event_reminders import DueState
from streams.slices.calendar.dispatch import DispatchConfig, poison_retry_at, wake_after

AS_OF = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
MINUTE, HOUR = timedelta(minutes=1), timedelta(hours=1)


def test_poison_backoff_doubles_from_the_next_cycle_and_is_capped() -> None:
    delays = [poison_retry_at(AS_OF, n, MINUTE, HOUR) - AS_OF for n in range(9)]
    assert delays[:7] == [MINUTE * 2**n for n in range(6)] + [HOUR]
    assert delays[7:] == [HOUR, HOUR]
    # A very large attempt count stays capped (no overflow).
    assert poison_retry_at(AS_OF, 10_000, MINUTE, HOUR) == AS_OF + HOUR


@pytest.mark.parametrize(
    ("base", "cap"),
    [
        (timedelta(0), HOUR),
        (timedelta(milliseconds=10), HOUR),
        (HOUR, MINUTE),
        (MINUTE, 2 * 24 * HOUR),
    ],
)
def test_poison_backoff_settings_are_validated(base: timedelta, cap: timedelta) -> None:
    with pytest.raises(ValueError, match="poison_backoff"):
        DispatchConfig(poison_backoff=base, poison_backoff_max=cap)


def test_a_run_never_wakes_into_the_past_for_rows_it_could_not_take() -> None:
    later = AS_OF + timedelta(seconds=20)
    locked = DueState(backlog=3, ready=3, oldest_due=AS_OF - HOUR, next_wake=later)
    assert wake_after(AS_OF, locked, cut_short=False) == later
    assert wake_after(AS_OF, DueState(3, 3, AS_OF - HOUR, None), cut_short=False) is None
    # Cut short (budget, shutdown) with claimable rows left: the drain goes on now.
    assert wake_after(AS_OF, locked, cut_short=True) == AS_OF
    # Cut short, but what is left is backing off: its retry time.
    backing_off = DueState(backlog=1, ready=0, oldest_due=AS_OF - HOUR, next_wake=later)
    assert wake_after(AS_OF, backing_off, cut_short=True) == later
