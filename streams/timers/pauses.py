"""Schedules paused cluster-wide at runtime: the flag in PostgreSQL (``ops.timer_pauses``,
set by ``streams timers pause NAME``) that every registry reads before each run it starts.

The read is one primary-key lookup per run (a wake-up or slot, not per loop turn). A paused
schedule's run does not start: it ends ``paused`` (counted and logged as such, never as a
failure), and a cluster-once slot is not claimed, so ``timers run --as-of`` or ``timers
backfill`` can still run it after the resume. Every path obeys it (the executor reads it
before any claim): scheduled slots, retries and hand-backs of released slots, takeovers of a
dead claimant's slot, manual runs and backfills; only ``--ignore-pause`` overrides it.

A failed read does not un-pause: the schedule keeps the state last read, and before any
read succeeded it counts as paused (its run would need the same database anyway);
``reminders_timer_pause_read_failures_total`` counts such reads.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from streams.timers.logfmt import event
from streams.timers.metrics import TimerMetrics
from streams.timers.state import ScheduleState


class PauseFlags(Protocol):
    """Where the flags live (db.timers.TimerRepository implements it)."""

    async def paused(self, name: str) -> bool: ...

    async def paused_names(self) -> Sequence[str]: ...


class PauseCheck:
    """Reads a schedule's flag before a run and keeps what it read on the schedule's state."""

    def __init__(self, flags: PauseFlags, metrics: TimerMetrics) -> None:
        self._flags = flags
        self._metrics = metrics

    async def paused(self, state: ScheduleState) -> bool:
        name = state.spec.name
        try:
            flag = await self._flags.paused(name)
        except Exception as exc:
            self._metrics.pause_read_failures.labels(schedule=name).inc()
            held = state.paused if state.paused is not None else True
            event(
                logging.WARNING,
                "timer_pause_read_failed",
                schedule=name,
                error=type(exc).__name__,
                treated_as="paused" if held else "running",
            )
            return held
        self.keep(state, flag)
        return flag

    def keep(self, state: ScheduleState, flag: bool) -> None:
        if state.paused is not None and flag != state.paused:
            event(
                logging.INFO, "timer_paused" if flag else "timer_resumed", schedule=state.spec.name
            )
        state.paused = flag
        self._metrics.paused.labels(schedule=state.spec.name).set(1 if flag else 0)

    async def refresh(self, states: Sequence[ScheduleState]) -> None:
        """Every schedule's flag in one read (for /timers); a failure keeps what was read."""
        try:
            names = set(await self._flags.paused_names())
        except Exception as exc:
            event(logging.WARNING, "timer_pause_read_failed", error=type(exc).__name__)
            return
        for state in states:
            if state.delegate is None:
                self.keep(state, state.spec.name in names)
            else:  # the timer process runs it and exports its gauge
                state.paused = state.spec.name in names
