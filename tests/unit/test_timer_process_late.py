"""What /health names as the timer process's stall: a child silent past the bound is silent,
whatever its loops said in its last line (their figures are stale once it says nothing)."""

from __future__ import annotations

import time

from streams.metrics import Metrics
from streams.timer_process.supervisor import TimerProcess
from streams.web.health import timer_process_check


def _heard(tp: TimerProcess, ago: float, loops: dict[str, float]) -> None:
    """As if the child's last line came ``ago`` seconds back, its loops due ``loops[name]``
    seconds back."""
    now = time.monotonic()
    tp._ready.set()
    tp._heard = now - ago
    tp._due = {name: now - late for name, late in loops.items()}


def test_a_child_silent_past_the_bound_is_silent_though_a_loop_was_late_in_its_last_line() -> None:
    tp = TimerProcess(Metrics(), "test:1", ["calendar-dispatch"], stall_seconds=2.0)
    _heard(tp, ago=3.0, loops={"calendar-dispatch": 4.0})
    what, late = tp.late
    assert what == "silent" and 3.0 <= late < 4.0, (what, late)
    assert timer_process_check(tp) == "stalled: silent for 3s"


def test_a_late_loop_of_a_child_that_still_talks_names_the_stall() -> None:
    tp = TimerProcess(Metrics(), "test:1", ["calendar-dispatch"], stall_seconds=2.0)
    _heard(tp, ago=0.5, loops={"calendar-dispatch": 4.0})
    assert tp.late[0] == "calendar-dispatch"
    assert timer_process_check(tp) == "stalled: calendar-dispatch late by 4s"
