"""Report subscription schedules (seed 003): the upcoming periods of a subscription in its
BU's zone. Pure: no I/O, no clock.

A scheduled run is identified by its period start (``report-subscription:{guid}:scheduled:
{periodStart}``, the UTC instant) and is due at that instant: the run for a period is
requested when the period starts. Periods start at local midnight in the BU's zone (Daily:
every day; Weekly: Mondays; Monthly: the 1st); a Cron is the five-field form
``minute hour day-of-month month day-of-week`` with ``*``, numbers and comma lists
(day-of-week 0-6, Sunday 0 or 7), evaluated in the BU's zone. Local times follow the
DateBased DST rule (gap → shifted forward, overlap → first occurrence).

``scheduled_runs(..., start, end)`` gives every period start in ``[start, end)``: one row per
upcoming period within the window.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from uuid import UUID

from streams.contracts.automation import ReportPeriod
from streams.domain.automation import (
    ReportManualInput,
    ReportScheduledInput,
    SchedulerCandidate,
)
from streams.domain.automation_triggers import local_to_utc, local_today

MAX_WINDOW = timedelta(days=62)


def _field(text: str, low: int, high: int) -> frozenset[int] | None:
    """None means ``*`` (any)."""
    if text == "*":
        return None
    values: set[int] = set()
    for part in text.split(","):
        value = int(part)
        if not low <= value <= high:
            raise ValueError(f"cron value {value} out of range {low}-{high}")
        values.add(value)
    return frozenset(values)


def parse_cron(
    cron: str,
) -> tuple[
    frozenset[int] | None,
    frozenset[int] | None,
    frozenset[int] | None,
    frozenset[int] | None,
    frozenset[int] | None,
]:
    parts = cron.split()
    if len(parts) != 5:
        raise ValueError("a Cron has five fields: minute hour day-of-month month day-of-week")
    dow = _field(parts[4], 0, 7)
    if dow is not None:
        dow = frozenset(7 if d == 0 else d for d in dow)  # ISO weekday, Sunday 7
    return (
        _field(parts[0], 0, 59),
        _field(parts[1], 0, 23),
        _field(parts[2], 1, 31),
        _field(parts[3], 1, 12),
        dow,
    )


def _days(start: datetime, end: datetime, zone: str) -> list[date]:
    first = local_today(start, zone) - timedelta(days=1)
    last = local_today(end, zone) + timedelta(days=1)
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def period_starts(
    period: ReportPeriod | None, cron: str | None, zone: str, start: datetime, end: datetime
) -> list[datetime]:
    """The UTC period starts in ``[start, end)`` (the window is capped at MAX_WINDOW)."""
    end = min(end, start + MAX_WINDOW)
    out: set[datetime] = set()
    if cron is not None:
        minutes, hours, doms, months, dows = parse_cron(cron)
        for day in _days(start, end, zone):
            if months is not None and day.month not in months:
                continue
            if doms is not None and day.day not in doms:
                continue
            if dows is not None and day.isoweekday() not in dows:
                continue
            for h in sorted(hours) if hours is not None else range(24):
                for m in sorted(minutes) if minutes is not None else range(60):
                    out.add(local_to_utc(day, time(h, m), zone))
    elif period is not None:
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
