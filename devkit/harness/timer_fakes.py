"""Fakes for tests of the timer registry: a slot store in memory and virtual-time waiting."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from streams.clock import ManualClock


@dataclass
class Claim:
    """One claimed slot as the in-memory store keeps it."""

    claimed_by: str
    run_id: str
    lease_expires_at: datetime | None
    result: str | None = None
    takeovers: int = 0
    attempts: int = 0
    handbacks: int = 0
    released: bool = False
    finished: bool = False
    last_error: str | None = None


class InMemoryTimerStore:
    """A TimerStore in one process; claims are insert-wins and finishes fenced, as in PostgreSQL."""

    def __init__(self) -> None:
        self.slots: dict[tuple[str, datetime], Claim] = {}
        self.state: dict[str, datetime] = {}

    @property
    def claims(self) -> dict[tuple[str, datetime], str]:
        return {k: c.claimed_by for k, c in self.slots.items()}

    @property
    def finished(self) -> dict[tuple[str, datetime], str]:
        return {k: c.result for k, c in self.slots.items() if c.finished and c.result is not None}

    async def last_slots(self, names: Sequence[str]) -> dict[str, datetime]:
        return {n: self.state[n] for n in names if n in self.state}

    async def claim_slot(
        self,
        name: str,
        slot: datetime,
        claimed_by: str,
        run_id: str,
        lease_expires_at: datetime | None = None,
    ) -> bool:
        if (name, slot) in self.slots:
            return False
        self.slots[(name, slot)] = Claim(claimed_by, run_id, lease_expires_at)
        return True

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
        claim = self.slots.get((name, slot))
        if claim is None or claim.finished or claim.lease_expires_at is None:
            return False
        if claim.lease_expires_at > now and not (released and claim.released):
            return False
        claim.claimed_by, claim.run_id, claim.lease_expires_at = (
            claimed_by,
            run_id,
            lease_expires_at,
        )
        if not claim.released:
            claim.takeovers += 1
        claim.released = False
        return True

    async def unfinished_slots(
        self, name: str, since: datetime, limit: int
    ) -> list[tuple[datetime, datetime]]:
        found = sorted(
            (slot, c.lease_expires_at)
            for (n, slot), c in self.slots.items()
            if n == name and slot >= since and not c.finished and c.lease_expires_at is not None
        )
        return found[:limit]

    async def advance_state(self, name: str, slot: datetime, worker: str) -> None:
        if name not in self.state or self.state[name] < slot:
            self.state[name] = slot

    async def give_up_released(self, name: str, before: datetime) -> list[datetime]:
        gone = []
        for (n, slot), claim in self.slots.items():
            if n == name and slot < before and claim.released and not claim.finished:
                claim.finished, claim.released = True, False
                gone.append(slot)
        return sorted(gone)

    async def slot_attempts(self, name: str, slot: datetime, run_id: str) -> int | None:
        claim = self.slots.get((name, slot))
        return claim.attempts if claim is not None and claim.run_id == run_id else None

    async def finish_slot(
        self,
        name: str,
        slot: datetime,
        run_id: str,
        result: str,
        duration_seconds: float,
        error: str | None = None,
    ) -> bool:
        claim = self.slots.get((name, slot))
        if claim is None or claim.run_id != run_id:
            return False
        claim.result, claim.finished, claim.released = result, True, False
        claim.attempts += 1
        claim.last_error = error or claim.last_error
        return True

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
        claim = self.slots.get((name, slot))
        if claim is None or claim.run_id != run_id or claim.finished:
            return False
        claim.result, claim.released, claim.last_error = result, True, error
        claim.lease_expires_at = next_attempt_at
        if counted:
            claim.attempts += 1
        else:
            claim.handbacks += 1
        return True

    async def prune_slots(self, before: datetime, limit: int) -> int:
        old = [k for k in self.slots if k[1] < before][:limit]
        for k in old:
            self.slots.pop(k)
        return len(old)


# A loop whose tasks never all wait is spinning: fail instead of hanging.
_MAX_TURNS = 100_000


async def quiescent() -> None:
    """Return once no other task of the event loop is ready to run: every one waits on a
    future (a sleeper, an event, a lock). A woken registry loop has then planned, claimed,
    run and parked again, in virtual time. Reads asyncio's ready queue (the default loop's),
    so it waits exactly as long as there is work, not a guessed number of turns."""
    ready = getattr(asyncio.get_running_loop(), "_ready", None)
    if ready is None:
        raise RuntimeError("quiescent() needs asyncio's default event loop")
    for _ in range(_MAX_TURNS):
        if not ready:
            return
        await asyncio.sleep(0)
    raise RuntimeError(f"the event loop never went quiet in {_MAX_TURNS} turns")


class FakeSleeper:
    """Virtual time: sleepers park until advance_to() moves the ManualClock past their instant."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._waiters: list[tuple[datetime, asyncio.Future[None]]] = []

    async def sleep_until(self, instant: datetime) -> None:
        if instant <= self.clock.now():
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (instant, future)
        self._waiters.append(waiter)
        try:
            await future
        finally:
            self._waiters.remove(waiter)

    async def advance_to(self, when: datetime) -> None:
        """Move time forward, waking every sleeper due on the way, in order."""
        while True:
            await quiescent()
            due = [i for i, f in self._waiters if i <= when and not f.done()]
            if not due:
                break
            step = min(due)
            if step > self.clock.now():
                self.clock.set(step)
            for instant, future in self._waiters:
                if instant <= self.clock.now() and not future.done():
                    future.set_result(None)
        if when > self.clock.now():
            self.clock.set(when)
        await quiescent()

    async def advance(self, delta: timedelta) -> None:
        await self.advance_to(self.clock.now() + delta)
