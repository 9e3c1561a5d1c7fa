"""The one budgeted drain loop of the retention jobs: bounded batches until short or out of time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from streams.clock import Clock


@dataclass(frozen=True, slots=True)
class Drained:
    rows: int
    batches: int
    more: bool
    """The budget ran out after a full batch: eligible rows may be left for the next run."""
    seconds: float

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


async def drain(
    batch: Callable[[], Awaitable[int]],
    *,
    size: int,
    budget_seconds: float,
    clock: Clock,
) -> Drained:
    """Call ``batch`` (one bounded statement in its own transaction, returning the rows it
    handled, at most ``size``) until one comes back short or ``budget_seconds`` are spent.
    A full batch never ends the run by itself: the job drains to its horizon in one run."""
    started = clock.monotonic()
    rows = batches = 0
    while True:
        n = await batch()
        rows += n
        batches += 1
        elapsed = clock.monotonic() - started
        if n < size:
            return Drained(rows, batches, False, elapsed)
        if elapsed >= budget_seconds:
            return Drained(rows, batches, True, elapsed)
