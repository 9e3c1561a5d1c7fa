"""Pure slot arithmetic for periodic schedules: interval windows, DST-correct cron times, keys."""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from streams.domain.local_time import wall_to_utc

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_DAY = timedelta(days=1)
# Bounds the walk over cron fire times; a schedule never has this many fires in one DST shift.
_MAX_CRON_STEPS = 10_000


@dataclass(frozen=True)
class Cadence:
    """When a schedule fires: a fixed interval (epoch-aligned) or a cron expression in a zone."""

    interval: timedelta | None = None
    cron: str | None = None
    # IANA zone the cron expression is read in; None means UTC. Intervals ignore zones.
    timezone: str | None = None

    def __post_init__(self) -> None:
        if (self.interval is None) == (self.cron is None):
            raise ValueError("a cadence has exactly one of interval and cron")
        if self.interval is not None and self.interval <= timedelta(0):
            raise ValueError("interval must be positive")
        if self.interval is not None and self.timezone is not None:
            raise ValueError("a time zone applies to cron expressions only")

    def describe(self) -> str:
        if self.interval is not None:
            return f"every {self.interval.total_seconds():g}s"
        return f"cron '{self.cron}' {self.timezone or 'UTC'}"


@dataclass(frozen=True)
class SlotRange:
    """Slots in a half-open span (after, until]: how many, and the latest of them in order."""

    count: int
    latest: tuple[datetime, ...]
    # True when count stopped at the cap (a cron walked over a very long downtime).
    capped: bool = False


def _aware(when: datetime, what: str = "instant") -> datetime:
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware, got naive {when.isoformat()}")
    return when


def _micros(delta: timedelta) -> int:
    # Exact integer arithmetic: float seconds would drift slots by a microsecond at times.
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def interval_slot(now: datetime, interval: timedelta) -> datetime:
    """floor(now / interval) * interval on the Unix epoch: the same for every worker in a window."""
    step = _micros(interval)
    if step <= 0:
        raise ValueError("interval must be positive")
    elapsed = _micros(_aware(now) - EPOCH)
    return EPOCH + timedelta(microseconds=(elapsed // step) * step)


def _zone(name: str | None) -> ZoneInfo | None:
    return None if name is None or name == "UTC" else ZoneInfo(name)


def _wall(when: datetime, zone: ZoneInfo | None) -> datetime:
    """The naive wall-clock reading of ``when`` in ``zone`` (UTC when None)."""
    return when.astimezone(zone or UTC).replace(tzinfo=None)


def _offset(when: datetime, zone: ZoneInfo) -> timedelta:
    offset = when.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _wall_to_utc(wall: datetime, zone: ZoneInfo | None) -> datetime:
    """Map a cron wall time to an instant under the product DST rule (one function for every
    local schedule: streams/domain/local_time.py): a repeated wall time (autumn) fires once,
    at its first occurrence; a wall time that does not exist (spring gap) fires at the
    instant the gap ends, as Vixie cron does; several such times collapse into that instant.
    """
    return wall_to_utc(wall, zone)


def _nearby_offsets(when: datetime, zone: ZoneInfo) -> list[timedelta]:
    # Cron candidates near ``when`` can only be displaced by a transition within a day.
    return [_offset(when + k * _DAY, zone) for k in (-1, 0, 1)]


def cron_slot(expr: str, now: datetime, timezone: str | None = None) -> datetime:
    """The latest fire time of ``expr`` at or before ``now`` (the tick's own scheduled time)."""
    now = _aware(now).astimezone(UTC)
    zone = _zone(timezone)
    start = _wall(now, zone)
    if zone is not None:
        # A wall time up to (max offset - current offset) later can still map to <= now.
        start += max(_nearby_offsets(now, zone)) - _offset(now, zone)
    # croniter's get_prev is strict; fires are whole seconds, so start one second past the floor.
    it = croniter(expr, start.replace(microsecond=0) + _SECOND)
    for _ in range(_MAX_CRON_STEPS):
        fire = _wall_to_utc(it.get_prev(datetime), zone)
        if fire <= now:
            return fire
    raise ValueError(f"cron {expr!r}: no fire time found before {now.isoformat()}")


def cron_next(expr: str, after: datetime, timezone: str | None = None) -> datetime:
    """The first fire time of ``expr`` strictly after ``after``."""
    after = _aware(after).astimezone(UTC)
    zone = _zone(timezone)
    start = _wall(after, zone)
    if zone is not None:
        start -= _offset(after, zone) - min(_nearby_offsets(after, zone))
    it = croniter(expr, start)
    for _ in range(_MAX_CRON_STEPS):
        fire = _wall_to_utc(it.get_next(datetime), zone)
        if fire > after:
            return fire
    raise ValueError(f"cron {expr!r}: no fire time found after {after.isoformat()}")


def slot_at(cadence: Cadence, now: datetime, tolerance: timedelta = timedelta(0)) -> datetime:
    """The slot a tick at ``now`` belongs to.

    ``tolerance`` lets a tick that fires a little early (timer granularity, a clock a few
    milliseconds behind) still belong to the fire time just ahead of it.
    """
    when = _aware(now) + tolerance
    if cadence.interval is not None:
        return interval_slot(when, cadence.interval)
    assert cadence.cron is not None
    return cron_slot(cadence.cron, when, cadence.timezone)


def next_fire(cadence: Cadence, after: datetime) -> datetime:
    """The first slot strictly after ``after``."""
    if cadence.interval is not None:
        return interval_slot(after, cadence.interval) + cadence.interval
    assert cadence.cron is not None
    return cron_next(cadence.cron, after, cadence.timezone)


def slots_between(
    cadence: Cadence, after: datetime, until: datetime, *, keep: int = 1000, cap: int = 100_000
) -> SlotRange:
    """Slots in (after, until]: their number and the latest ``keep`` of them, oldest first."""
    if keep < 1:
        raise ValueError("keep must be at least 1")
    if _aware(until) <= _aware(after):
        return SlotRange(0, ())
    if cadence.interval is not None:
        step = cadence.interval
        last = interval_slot(until, step)
        first = interval_slot(after, step) + step
        if last < first:
            return SlotRange(0, ())
        count = _micros(last - first) // _micros(step) + 1
        shown = min(count, keep)
        return SlotRange(count, tuple(last - step * k for k in range(shown - 1, -1, -1)))
    latest: deque[datetime] = deque(maxlen=keep)
    fire = next_fire(cadence, after)
    count = 0
    while fire <= until and count < cap:
        latest.append(fire)
        count += 1
        fire = next_fire(cadence, fire)
    capped = fire <= until
    if capped:
        # Walked into the cap: the remembered tail is not the real tail; take it from the end.
        tail: list[datetime] = []
        at = slot_at(cadence, until)
        while at > after and len(tail) < keep:
            tail.append(at)
            at = slot_at(cadence, at - timedelta(microseconds=1))
        latest = deque(reversed(tail), maxlen=keep)
    return SlotRange(count, tuple(latest), capped)


def min_period(cadence: Cadence, reference: datetime, samples: int = 32) -> timedelta:
    """The shortest gap between consecutive fires (a cron's, sampled after ``reference``)."""
    if cadence.interval is not None:
        return cadence.interval
    fires = [next_fire(cadence, reference)]
    for _ in range(samples):
        fires.append(next_fire(cadence, fires[-1]))
    return min(b - a for a, b in itertools.pairwise(fires))


def iso_utc(when: datetime) -> str:
    """ISO 8601 in UTC with a ``Z``: the form every worker writes for the same instant."""
    return _aware(when).astimezone(UTC).isoformat().replace("+00:00", "Z")


def slot_key(name: str, slot: datetime) -> str:
    """``name:scheduledAt`` - the cluster-wide identity of one run of a schedule."""
    return f"{name}:{iso_utc(slot)}"


def fanout_key(name: str, owner_id: object, slot: datetime) -> str:
    """``name:ownerId:slot`` - per-owner identity for handlers that fan one slot out."""
    owner = str(owner_id)
    if not owner or ":" in owner:
        raise ValueError("owner id must be non-empty and contain no ':'")
    return f"{name}:{owner}:{iso_utc(slot)}"
