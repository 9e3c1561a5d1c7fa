"""What one run of a timer handler is given: its as-of instant, run id, budget and stop flag."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from streams.clock import Clock

# The budget of a run started by RunContext.at (a direct call, a test): a schedule's default.
DEFAULT_BUDGET = timedelta(seconds=30)


def _never() -> bool:
    return False


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """One run of a handler, as the registry's executor starts it.

    ``deadline`` and ``started`` are ``clock.monotonic()`` instants on the registry's clock
    (the runtime's): the run started at ``started`` and is cancelled at ``deadline`` (start +
    the schedule's max duration), so a handler that works in batches starts none it could
    not finish by then. ``run_id`` is the registry's id of the run: the handler's result,
    its log lines and the correlation-id of its outbox records carry it.
    """

    as_of: datetime
    run_id: str
    deadline: float
    started: float
    should_stop: Callable[[], bool] = _never
    # The slot the run is for; None for a wake-up or a rerun.
    slot: datetime | None = None
    # scheduled, catch_up, coalesced, wake, manual, manual_rerun, reclaimed; direct outside
    # the registry.
    kind: str = "direct"

    @classmethod
    def at(
        cls,
        as_of: datetime,
        *,
        clock: Clock,
        budget: timedelta = DEFAULT_BUDGET,
        run_id: str | None = None,
        should_stop: Callable[[], bool] | None = None,
        slot: datetime | None = None,
        kind: str = "direct",
    ) -> RunContext:
        """A context for calling a handler directly (tests, benches, tools): the run starts
        now on ``clock`` (the handler's), with ``budget`` to its deadline, a fresh run id
        unless given, and never asked to stop unless ``should_stop`` says so."""
        if budget <= timedelta(0):
            raise ValueError(f"budget must be positive, got {budget}")
        started = clock.monotonic()
        return cls(
            as_of=as_of,
            run_id=run_id or uuid.uuid4().hex,
            deadline=started + budget.total_seconds(),
            started=started,
            should_stop=should_stop or _never,
            slot=slot,
            kind=kind,
        )

    @property
    def budget(self) -> float:
        """Seconds from the run's start to its deadline."""
        return self.deadline - self.started

    def remaining(self, clock: Clock) -> float:
        """Seconds left before the deadline on ``clock`` (negative once it passed)."""
        return self.deadline - clock.monotonic()

    def cutoff(self, reserve: float) -> float:
        """The instant by which work should end to keep ``reserve`` (a fraction of the
        budget) free before the deadline, for what a run does after its batches."""
        return self.started + self.budget * (1 - reserve)
