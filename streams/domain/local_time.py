"""Local wall time → UTC under the product DST rule, and the standard cron syntax: the one
implementation the timer registry, DateBased reminders and report subscriptions share.
Pure: no I/O, no clock.

DST rule (docs/rules.md):

- **gap** (spring forward: the local time does not exist) → the instant the gap ends, i.e.
  the first valid local time after it: 02:30 in Berlin on a day the clocks jump 02:00→03:00
  is 03:00 CEST; 02:15 in Lord Howe on a day they jump 02:00→02:30 is 02:30 (+11). Every
  local time inside one gap maps to that same instant, so the mapping stays monotonic (a
  later wall time is never an earlier instant) and a cron's gap fires collapse into one.
- **overlap** (fall back: the local time happens twice) → its first occurrence (the earlier
  instant, still on the old offset); the repeat is the same instant, so it fires once.

Cron: five fields (minute hour day-of-month month day-of-week) with the standard syntax —
``*``, numbers, ranges ``a-b``, steps ``*/n`` and ``a-b/n``, lists, month and day names,
Sunday as 0 or 7 — and the standard day rule: when both day-of-month and day-of-week are
restricted, a day matching either fires (croniter's ``day_or``). Extensions (seconds, ``L``,
``W``, ``#``, ``?``, ``@daily``) are refused.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

_NUMERIC = re.compile(r"^[0-9*,/-]+$")
_NAMED = re.compile(r"^[0-9A-Za-z*,/-]+$")


def _zone(zone: ZoneInfo | str | None) -> ZoneInfo | None:
    if zone is None or zone == "UTC":
        return None
    return zone if isinstance(zone, ZoneInfo) else ZoneInfo(zone)


def _offset(when: datetime, zone: ZoneInfo) -> timedelta | None:
    return when.astimezone(zone).utcoffset()


def wall_to_utc(wall: datetime, zone: ZoneInfo | str | None) -> datetime:
    """The UTC instant of the naive local ``wall`` time in ``zone`` (None/"UTC": UTC)."""
    if wall.tzinfo is not None:
        raise ValueError("a wall time is naive")
    tz = _zone(zone)
    if tz is None:
        return wall.replace(tzinfo=UTC)
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if first.astimezone(tz).replace(tzinfo=None) == wall:
        return first  # exists; in an overlap fold=0 is the first occurrence
    # In a gap fold=0 reads the wall with the old offset (a later instant), fold=1 with the
    # new one (an earlier instant); the transition lies between. Transitions fall on whole
    # seconds, so bisection over integer seconds is exact.
    lo = math.floor(wall.replace(tzinfo=tz, fold=1).timestamp())
    hi = math.ceil(first.timestamp())
    after = _offset(first, tz)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset(datetime.fromtimestamp(mid, UTC), tz) == after:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)


def local_to_utc(day: date, at: time, zone: str) -> datetime:
    """The UTC instant of local ``day`` ``at`` in ``zone`` under the DST rule."""
    return wall_to_utc(datetime.combine(day, at), zone)


def local_today(as_of: datetime, zone: str) -> date:
    return as_of.astimezone(ZoneInfo(zone)).date()


def cron_problem(expr: str) -> str | None:
    """Why ``expr`` is not a standard five-field cron, or None."""
    fields = expr.split()
    if len(fields) != 5:
        return f"cron {expr!r} must have five fields: minute hour day-of-month month day-of-week"
    minute, hour, dom, month, dow = fields
    standard = (
        all(_NUMERIC.match(f) for f in (minute, hour, dom))
        and all(_NAMED.match(f) for f in (month, dow))
        and "L" not in dow.upper()  # no day-of-week name has an L: this is cron's "last"
    )
    if not standard:
        return f"cron {expr!r} uses syntax outside standard cron (L, W, #, ?)"
    if not croniter.is_valid(expr):
        return f"invalid cron expression {expr!r}"
    return None
