"""A schedule's planning bookkeeping: which slots run now (misfire.plan), with the missed
slots counted and logged, and the ticks a long step skipped because runs never overlap."""

from __future__ import annotations

import logging
from datetime import datetime

from streams.timers import misfire, slots
from streams.timers.logfmt import event
from streams.timers.metrics import TimerMetrics
from streams.timers.misfire import PlannedRun
from streams.timers.state import ScheduleState


def plan_runs(entry: ScheduleState, now: datetime, metrics: TimerMetrics) -> tuple[PlannedRun, ...]:
    """Which slots to run now (misfire.plan), with the plan's bookkeeping applied."""
    if entry.horizon is None:
        entry.horizon = now
        return ()
    spec = entry.spec
    plan = misfire.plan(spec, entry.horizon, now, counted_until=entry.missed_until)
    entry.horizon, entry.missed_until = plan.horizon, plan.counted_until
    if plan.fresh_missed:
        entry.stats.missed += plan.fresh_missed
        metrics.missed.labels(schedule=spec.name).inc(plan.fresh_missed)
    if plan.missed:
        missed = plan.missed_slots
        event(
            logging.WARNING,
            "reminders_timer_missed_slots",
            schedule=spec.name,
            count=plan.missed,
            first=missed[0] if missed else None,
            last=missed[-1] if missed else None,
            policy=spec.misfire.value,
        )
    return plan.runs


def count_overlap(
    entry: ScheduleState, planned_at: datetime, ended: datetime, metrics: TimerMetrics
) -> None:
    """Ticks that fired while a step ran (``planned_at`` to ``ended``) were skipped because
    of overlap; the next planning pass decides whether they still run (grace, misfire)."""
    skipped = slots.slots_between(entry.spec.cadence, planned_at, ended, keep=1).count
    if skipped:
        entry.stats.skipped_overlap += skipped
        metrics.overlap_skips.labels(schedule=entry.spec.name).inc(skipped)
        event(logging.WARNING, "timer_overlap_skip", schedule=entry.spec.name, ticks=skipped)
