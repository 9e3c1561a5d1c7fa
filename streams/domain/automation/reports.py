"""Report subscription schedules (seed 003): the upcoming periods of a subscription in its
BU's zone. Pure: no I/O, no clock.

A scheduled run is identified by its period start (``report-subscription:{guid}:scheduled:
{periodStart}``, the UTC instant) and is due at that instant: the run for a period is
requested when the period starts. Periods start at local midnight in the BU's zone (Daily:
every day; Weekly: Mondays; Monthly: the 1st); a Cron is a standard five-field cron
evaluated in the BU's zone by the timer registry's own cron walk (``streams.timers.slots``,
croniter: ranges, steps, names, Sunday 0 or 7, day-of-month OR day-of-week). Local times
follow the one DST rule (``streams/domain/local_time.py``: gap → the instant it ends,
overlap → the first occurrence).

``scheduled_runs(..., start, end)`` gives every period start in ``[start, end)``: one row per
upcoming period within the window.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from uuid import UUID

from streams.contracts.automation import ReportPeriod
from streams.domain.automation.rules import (
    ReportManualInput,
    ReportScheduledInput,
    SchedulerCandidate,
)
from streams.domain.local_time import cron_problem, local_to_utc, local_today
from streams.timers.slots import cron_next

MAX_WINDOW = timedelta(days=62)
_TICK = timedelta(microseconds=1)


def check_cron(cron: str) -> str:
    """``cron`` if it is a standard five-field cron; ValueError (naming the cron) if not."""
    problem = cron_problem(cron)
    if problem is not None:
        raise ValueError(problem)
    return cron


def _days(start: datetime, end: datetime, zone: str) -> list[date]:
    first = local_today(start, zone) - timedelta(days=1)
    last = local_today(end, zone) + timedelta(days=1)
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def cron_starts(cron: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """The fires of ``cron`` in ``zone`` within ``[start, end)``, in order."""
    check_cron(cron)
    out: list[datetime] = []
    at = cron_next(cron, start - _TICK, zone)
    while at < end:
        out.append(at)
        at = cron_next(cron, at, zone)
    return out


def period_starts(
    period: ReportPeriod | None, cron: str | None, zone: str, start: datetime, end: datetime
) -> list[datetime]:
    """The UTC period starts in ``[start, end)`` (the window is capped at MAX_WINDOW)."""
    end = min(end, start + MAX_WINDOW)
    if cron is not None:
        return cron_starts(cron, zone, start, end)
    out: set[datetime] = set()
    if period is not None:
        for day in _days(start, end, zone):
            if period is ReportPeriod.WEEKLY and day.isoweekday() != 1:
                continue
            if period is ReportPeriod.MONTHLY and day.day != 1:
                continue
            out.add(local_to_utc(day, time(0, 0), zone))
    return sorted(t for t in out if start <= t < end)


def scheduled_runs(
    subscription_guid: UUID,
    period: ReportPeriod | None,
    cron: str | None,
    zone: str,
    start: datetime,
    end: datetime,
) -> list[SchedulerCandidate]:
    return [
        SchedulerCandidate(
            ReportScheduledInput(subscription_guid, t), t, local_today(t, zone), zone
        )
        for t in period_starts(period, cron, zone, start, end)
    ]


def manual_run(
    subscription_guid: UUID, manual_run_guid: UUID, requested_at: datetime
) -> SchedulerCandidate:
    return SchedulerCandidate(ReportManualInput(subscription_guid, manual_run_guid), requested_at)
