"""What the timer registry needs from outside: the slot store, a way to wait, real waiting."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from streams.clock import Clock


class TimerStore(Protocol):
    """What the registry needs from PostgreSQL (db.timers.TimerRepository implements it)."""

    async def last_slots(self, names: Sequence[str]) -> dict[str, datetime]: ...

    async def claim_slot(
        self,
        name: str,
        slot: datetime,
        claimed_by: str,
        run_id: str,
        lease_expires_at: datetime | None = None,
    ) -> bool:
        """Insert-wins claim of (name, slot), held until ``lease_expires_at``: True for
        exactly one caller."""
        ...

    async def reclaim_slot(
        self,
        name: str,
        slot: datetime,
        claimed_by: str,
        run_id: str,
        lease_expires_at: datetime,
        now: datetime,
        *,
        released: bool = False,
    ) -> bool:
        """Take over (name, slot) if its run never finished and its lease ran out by ``now``
        (a released slot's lease is its next attempt), or with ``released`` any released
        slot: True for at most one caller."""
        ...

    async def unfinished_slots(
        self, name: str, since: datetime, limit: int
    ) -> list[tuple[datetime, datetime]]:
        """(slot, lease_expires_at) of the slots of ``name`` from ``since`` on whose run has
        not finished, oldest first."""
        ...

    async def advance_state(self, name: str, slot: datetime, worker: str) -> None:
        """Remember ``slot`` as the latest started slot of ``name`` (never moves backwards)."""
        ...

    async def give_up_released(self, name: str, before: datetime) -> list[datetime]:
        """Finish the released slots of ``name`` older than ``before`` (past their retry
        window) with their last result; each slot is returned to one caller only."""
        ...

    async def slot_attempts(self, name: str, slot: datetime, run_id: str) -> int | None:
        """Attempts of (name, slot) that ended so far; None unless run ``run_id`` holds it."""
        ...

    async def finish_slot(
        self,
        name: str,
        slot: datetime,
        run_id: str,
        result: str,
        duration_seconds: float,
        error: str | None = None,
    ) -> bool:
        """Record the final end of run ``run_id`` (one more attempt); False when the slot was
        taken over meanwhile."""
        ...

    async def release_slot(
        self,
        name: str,
        slot: datetime,
        run_id: str,
        result: str,
        duration_seconds: float,
        next_attempt_at: datetime,
        *,
        counted: bool,
        error: str | None,
    ) -> bool:
        """Leave (name, slot) unfinished and unheld until ``next_attempt_at`` (an attempt
        more when ``counted``); False when run ``run_id`` no longer holds it."""
        ...

    async def prune_slots(self, before: datetime, limit: int) -> int: ...


class Sleeper(Protocol):
    async def sleep_until(self, instant: datetime) -> None:
        """Return once the clock reads ``instant`` or later (tests fake this to skip waiting)."""
        ...


class ClockSleeper:
    """Real waiting against a Clock; re-reads the clock so wall-clock steps are honoured."""

    def __init__(self, clock: Clock, max_nap: float = 30.0) -> None:
        self._clock = clock
        self._max_nap = max_nap

    async def sleep_until(self, instant: datetime) -> None:
        while True:
            delay = (instant - self._clock.now()).total_seconds()
            if delay <= 0:
                return
            await asyncio.sleep(min(delay, self._max_nap))
