"""Injectable time: every rule takes ``as_of`` from a clock, so tests never sleep."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a monotonic scale, for durations."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to (tests, simulations)."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start")
        self._now = start
        self._mono = 0.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, delta: timedelta | float) -> None:
        seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        self._now += timedelta(seconds=seconds)
        self._mono += seconds

    def set(self, when: datetime) -> None:
        self.advance(when - self._now)


class DatabaseClock:
    """PostgreSQL's time, as a worker's clock: ``now()`` is the database's ``clock_timestamp()``
    at the last reading plus the monotonic time elapsed since, so every due, lease and
    retention comparison a worker makes uses the database's time, whatever its own wall
    clock says (a worker whose clock is fast would otherwise send early and win every race).
    The worker's wall clock is only compared with it: ``skew_seconds``.

    Readings come from ``streams/clock_sync.py`` (the runtime takes one before its pool is
    handed out, then one every ``CLOCK_SYNC_INTERVAL_SECONDS``). Before the first reading
    ``now()`` is the local clock's. ``now()`` never goes back: a new reading that lands a few
    microseconds behind the last answer (its round trip's error) holds time still instead.
    """

    def __init__(self, local: Clock | None = None, *, max_round_trip: float = 1.0) -> None:
        self._local: Clock = local or SystemClock()
        self._max_round_trip = max_round_trip
        self._anchor: tuple[datetime, float] | None = None
        self._last: datetime | None = None
        self.skew_seconds: float | None = None
        self.round_trip_seconds: float | None = None

    @property
    def synced(self) -> bool:
        return self._anchor is not None

    def local_now(self) -> datetime:
        """The worker's own wall clock (only for comparing with the database's)."""
        return self._local.now()

    def monotonic(self) -> float:
        return self._local.monotonic()

    def now(self) -> datetime:
        if self._anchor is None:
            return self._local.now()
        at, mono = self._anchor
        now = at + timedelta(seconds=self._local.monotonic() - mono)
        if self._last is not None and now < self._last:
            return self._last
        self._last = now
        return now

    def observe(
        self, database_now: datetime, sent: float, received: float, local_now: datetime
    ) -> bool:
        """One reading: the database answered ``database_now`` between the monotonic instants
        ``sent`` and ``received``; ``local_now`` is the wall clock at ``received``. The answer
        is taken as the database's time at the middle of the round trip (error at most half
        of it). A reading whose round trip exceeds ``max_round_trip`` is ignored once the
        clock has one (False)."""
        if database_now.tzinfo is None:
            raise ValueError("DatabaseClock needs a timezone-aware reading")
        trip = max(0.0, received - sent)
        if self._anchor is not None and trip > self._max_round_trip:
            return False
        middle = sent + trip / 2
        self._anchor = (database_now, middle)
        self.round_trip_seconds = trip
        local_at_middle = local_now - timedelta(seconds=received - middle)
        self.skew_seconds = (local_at_middle - database_now).total_seconds()
        return True
