"""Per-schedule state inside the registry: planning horizon, retries, lease checks, wake-ups."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from streams.timers.runs import RunStats
from streams.timers.schedule import ResolvedSchedule
from streams.timers.slots import next_fire


@dataclass
class ScheduleState:
    spec: ResolvedSchedule
    stats: RunStats = field(default_factory=RunStats)
    # Every slot at or before the horizon has been planned (run, deduped, missed or skipped).
    horizon: datetime | None = None
    # Missed slots up to here are counted already (a slot planned again after a failed claim
    # is counted once).
    missed_until: datetime | None = None
    # After a failed slot claim: no planning before retry_at (backoff), consecutive failures.
    retry_at: datetime | None = None
    claim_failures: int = 0
    # Cluster-once: when the next unfinished slot's lease runs out (look for a takeover then).
    lease_check_at: datetime | None = None
    wake_at: datetime | None = None
    # Runs started so far, and how many had started when the pending wake-up was asked for:
    # only a run that starts after the request can serve it.
    started: int = 0
    wake_floor: int = 0
    busy: bool = False
    current: asyncio.Task[object] | None = None
    loop_task: asyncio.Task[None] | None = None
    wake_event: asyncio.Event = field(default_factory=asyncio.Event)
    # Another process of this worker runs the schedule (its timer process): wake-ups go here.
    delegate: Callable[[str, datetime | None], None] | None = None
    # Paused cluster-wide (ops.timer_pauses) as last read; None before the first read.
    paused: bool | None = None

    def track(self, task: asyncio.Task[object] | None) -> None:
        """The handler task now running (None when none is)."""
        self.current = task

    def next_target(self, now: datetime) -> datetime:
        """When the loop should step next: the next slot (not before a claim retry's
        backoff), or an earlier wake-up or lease expiry."""
        target = next_fire(self.spec.cadence, self.horizon or now)
        if self.retry_at is not None and target < self.retry_at:
            target = self.retry_at
        for extra in (self.wake_at, self.lease_check_at):
            if extra is not None and extra < target:
                target = extra
        return target

    def next_fire_at(self, now: datetime) -> datetime | None:
        """The next slot or wake-up, as /timers shows it (None when disabled)."""
        if not self.spec.enabled:
            return None
        at = next_fire(self.spec.cadence, self.horizon or now)
        if self.wake_at is not None and self.wake_at < at:
            at = self.wake_at
        return at
