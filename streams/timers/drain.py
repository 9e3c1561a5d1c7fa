"""The one budgeted batch loop of the timer handlers: batches until one comes back short, the
next could not finish before the run's deadline, or the worker stops."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from streams.clock import Clock
from streams.timers.context import RunContext

# Part of the run's budget kept free by default after the batches (the handler's own
# closing work: a backlog query, metrics), besides the longest batch seen so far.
DEFAULT_RESERVE = 0.1


@dataclass(frozen=True)
class DrainOutcome:
    """How a drain ended. Both flags are about a full last batch (a backlog may be left)."""

    # Batches that returned (a failed one raises instead).
    batches: int = 0
    # Lanes that were started (1 unless ``lanes`` > 1 and a batch came back full).
    lanes: int = 1
    # The next batch could not have finished before the cutoff.
    budget_exhausted: bool = False
    # ``ctx.should_stop()`` said stop.
    stopped_with_backlog: bool = False

    @property
    def cut_short(self) -> bool:
        """The drain ended with a full batch: by its budget or by a stop."""
        return self.budget_exhausted or self.stopped_with_backlog


async def drain(
    ctx: RunContext,
    batch: Callable[[], Awaitable[int]],
    *,
    clock: Clock,
    batch_size: int,
    reserve: float | None = DEFAULT_RESERVE,
    lanes: int = 1,
    lookahead: bool = True,
    stop_first: bool = False,
) -> DrainOutcome:
    """Call ``batch`` (one bounded unit of work returning how many items it took, at most
    ``batch_size``) again and again until one comes back short.

    After a full batch it stops when the run's budget would be crossed: with ``lookahead``,
    when the end of one more batch as long as the longest so far would pass
    ``ctx.cutoff(reserve)``; without it, once the clock has passed the cutoff. A ``reserve``
    of None leaves the budget to the registry's timeout. It stops too when
    ``ctx.should_stop()`` (between batches, never inside one; also before the first one when
    ``stop_first``).

    ``lanes`` > 1: once a batch came back full (a backlog), another lane starts its own loop
    beside it, up to ``lanes`` in flight; each stops by the same rules. A lane's error
    propagates once every lane has ended (a batch is never cut inside its transaction by
    another lane's failure); cancelling the drain cancels every lane and waits for them.
    """
    if lanes < 1:
        raise ValueError(f"lanes must be >= 1, got {lanes}")
    cutoff = None if reserve is None else ctx.cutoff(reserve)
    longest = 0.0
    batches = 0
    exhausted = stopped = False
    tasks: list[asyncio.Task[None]] = []

    async def lane() -> None:
        nonlocal longest, batches, exhausted, stopped
        while True:
            began = clock.monotonic()
            n = await batch()
            ended = clock.monotonic()
            batches += 1
            longest = max(longest, ended - began)
            if n < batch_size:
                return
            over = cutoff is not None and ended + (longest if lookahead else 0.0) >= cutoff
            stop = ctx.should_stop()
            if over or stop:
                exhausted = exhausted or over
                stopped = stopped or stop
                return
            if lanes > 1 and len(tasks) < lanes:
                # A full batch: a backlog. Another lane claims the next items in its own
                # transaction while this one writes, so their work overlaps.
                tasks.append(asyncio.create_task(lane()))

    if stop_first and ctx.should_stop():
        return DrainOutcome()
    if lanes == 1:
        await lane()
        return DrainOutcome(batches, 1, exhausted, stopped)
    try:
        tasks.append(asyncio.create_task(lane()))
        while not all(task.done() for task in tasks):
            await asyncio.wait(tasks)  # a lane may start another while we wait
        for task in tasks:
            task.result()
    except BaseException:
        for task in tasks:
            task.cancel()  # the run is cancelled or failed: the lanes still running roll back
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return DrainOutcome(batches, len(tasks), exhausted, stopped)
