"""The cycle lines of a timer handler: ``cycle_started`` and ``cycle_completed`` for every run, at a level that shows each schedule alive without flooding INFO.

Every run writes both lines: ``cycle_started`` (run id, as-of and what the handler adds, e.g.
thresholds) when it begins, ``cycle_completed`` (the handler's counts, zeros included,
``duration_ms``, ``outcome`` ok or failed, and on failure ``error``: the exception's class)
when it ends, returns or raises.

Their level. INFO for every run would be two lines a second for a schedule run every second
(an interval set so, or calendar-dispatch's precise wake-ups when reminders come due every
second): 172,800 lines a day of ``sent=0 skipped=0`` per schedule (a JSON pair is 661 bytes:
57 MB a day), most of an INFO log at rest. So a run's pair is at INFO when it says something: the first run of
the process, every run after one that did work or failed (a backlog being worked off is
followed run by run), and, while the schedule is idle, one run per ``SUMMARY_SECONDS`` (60 s):
its ``cycle_completed`` carries ``idle_runs``, the idle runs since the last INFO pair, whose
two lines were written at DEBUG. An idle schedule thus writes 2 INFO lines a minute (2,880 a
day, under 1 MB), a busy one a pair per run, and ``LOG_LEVEL=debug`` (or ``LOG_LEVELS=streams.slices=debug``)
shows every pair. The level is chosen when the run starts, so both lines get it; the one
exception: a run started at DEBUG that then does work or fails writes its ``cycle_completed``
at INFO with the start's fields repeated, so no run with work or a failure is missing at INFO.
Schedules slower than ``SUMMARY_SECONDS`` (document-expiry, daily) are at INFO on every run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

from streams import logs
from streams.clock import Clock

SUMMARY_SECONDS: Final = 60.0


class CycleLog:
    """One schedule's cycle lines; its handler keeps one and calls ``start`` per run."""

    def __init__(
        self, logger: logging.Logger, clock: Clock, *, summary_seconds: float = SUMMARY_SECONDS
    ) -> None:
        self.logger = logger
        self.clock = clock
        self.summary_seconds = summary_seconds
        self._last_info: float | None = None  # monotonic time of the last INFO pair's start
        self._loud_next = True  # the previous run worked or failed (or there was none)
        self._idle_runs = 0  # runs at DEBUG since the last INFO pair

    def start(self, run_id: str, **fields: object) -> Cycle:
        """Write ``cycle_started`` and return the run's cycle, to complete."""
        now = self.clock.monotonic()
        due = self._last_info is None or now - self._last_info >= self.summary_seconds
        level = logging.INFO if self._loud_next or due else logging.DEBUG
        if level == logging.INFO:
            self._last_info = now
        cycle = Cycle(self, level, run_id, fields, now)
        logs.event(self.logger, level, "cycle_started", run_id=run_id, **fields)
        return cycle


class Cycle:
    """One run's pair of lines: ``completed`` or ``failed`` writes the second."""

    def __init__(
        self, log: CycleLog, level: int, run_id: str, fields: dict[str, object], began: float
    ) -> None:
        self.log = log
        self.level = level
        self.run_id = run_id
        self.fields = fields
        self.began = began
        self.done = False

    def completed(self, counts: Mapping[str, object], *, worked: bool) -> None:
        """The run ended: ``worked`` says whether it did anything (sent, skipped, failed an
        item); ``counts`` are written as they are, zeros too."""
        self._finish(worked, "ok", None, counts)

    def failed(
        self, exc: BaseException, counts: Mapping[str, object], *, outcome: str = "failed"
    ) -> None:
        """The run raised ``exc``: its class is the line's ``error`` (``outcome`` says what
        kind of end it was: failed, or handed_back for a slot given back unfinished)."""
        self._finish(True, outcome, type(exc).__name__, counts)

    def _finish(
        self, loud: bool, outcome: str, error: str | None, given: Mapping[str, object]
    ) -> None:
        if self.done:
            return
        self.done = True
        owner = self.log
        level = self.level
        extra: dict[str, object] = {}
        if level == logging.INFO:
            extra["idle_runs"] = owner._idle_runs
            owner._idle_runs = 0
        elif loud:
            level = logging.INFO
            extra = {**self.fields, "started_at_level": "debug", "idle_runs": owner._idle_runs}
            owner._idle_runs = 0
            owner._last_info = owner.clock.monotonic()
        else:
            owner._idle_runs += 1
        owner._loud_next = loud
        counts = dict(given)
        if "duration_ms" not in counts:
            counts["duration_ms"] = round((owner.clock.monotonic() - self.began) * 1000, 3)
        fields: dict[str, object] = {"run_id": self.run_id, **counts, "outcome": outcome}
        if error is not None:
            fields["error"] = error
        logs.event(owner.logger, level, "cycle_completed", **fields, **extra)
