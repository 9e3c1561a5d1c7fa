"""The misfire planner: which slots between the horizon and now run, and which were missed.

Pure functions over plain data; the registry applies what they return.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from streams.timers.schedule import Misfire, ResolvedSchedule
from streams.timers.slots import slot_at, slots_between

# Slots remembered per planning step; the catch-up window is validated to fit in it.
MAX_BACKLOG = 1000


class PlannedRun(NamedTuple):
    slot: datetime
    # on_time, catch_up or coalesced
    kind: str


@dataclass(frozen=True)
class Plan:
    """What to do with the slots in (horizon, now]."""

    # Oldest first; the on-time run (if any) comes last.
    runs: tuple[PlannedRun, ...]
    # Every slot at or before this instant is planned now (run, missed or skipped).
    horizon: datetime
    # The latest slot, when it is still within the misfire grace.
    on_time: datetime | None = None
    # Slots in (horizon, now] that lost their on-time run (downtime, an overrun, a failed claim).
    missed: int = 0
    # The latest MAX_BACKLOG of them, oldest first.
    missed_slots: tuple[datetime, ...] = ()
    # Of ``missed``, those no earlier plan counted (a slot planned again after a failed claim
    # is counted once).
    fresh_missed: int = 0
    # Missed slots up to here are counted (pass it back as ``counted_until`` next time).
    counted_until: datetime | None = None


def plan(
    spec: ResolvedSchedule,
    horizon: datetime,
    now: datetime,
    *,
    counted_until: datetime | None = None,
    backlog: int = MAX_BACKLOG,
) -> Plan:
    """Plan the slots in (horizon, now]: the on-time one, plus missed ones per the policy.

    ``counted_until`` is the previous plan's, so missed slots planned again after a failed
    claim are not counted twice.
    """
    if now <= horizon:
        return Plan((), horizon, counted_until=counted_until)
    due = slots_between(spec.cadence, horizon, now, keep=backlog)
    if due.count == 0:
        return Plan((), now, counted_until=counted_until)
    latest = due.latest[-1]
    on_time = latest if now - latest <= spec.misfire_grace else None
    missed = due.latest[:-1] if on_time else due.latest
    missed_count = due.count - (1 if on_time else 0)
    runs: list[PlannedRun] = []
    fresh = 0
    if missed_count:
        fresh = missed_count
        if counted_until is not None and counted_until > horizon:
            fresh -= slots_between(spec.cadence, horizon, min(counted_until, now)).count
        if missed:
            counted_until = max(missed[-1], counted_until or missed[-1])
        if spec.misfire is Misfire.CATCH_UP:
            assert spec.catch_up_window is not None
            oldest = now - spec.catch_up_window
            runs.extend(PlannedRun(s, "catch_up") for s in missed if s >= oldest)
        elif spec.misfire is Misfire.COALESCE and missed:
            runs.append(PlannedRun(missed[-1], "coalesced"))
    if on_time is not None:
        runs.append(PlannedRun(on_time, "on_time"))
    return Plan(
        runs=tuple(runs),
        horizon=now,
        on_time=on_time,
        missed=missed_count,
        missed_slots=tuple(missed),
        fresh_missed=max(fresh, 0),
        counted_until=counted_until,
    )


def reclaim_floor(spec: ResolvedSchedule, now: datetime) -> datetime:
    """The oldest slot still worth running after its claimant died: within the catch-up
    window for catch_up; otherwise only the latest slot (skip and coalesce never replay
    an older slot - the next one does its work)."""
    if spec.misfire is Misfire.CATCH_UP:
        assert spec.catch_up_window is not None
        return now - spec.catch_up_window
    return slot_at(spec.cadence, now)
