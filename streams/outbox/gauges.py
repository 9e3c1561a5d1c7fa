"""When the relay reads its backlog gauges again.

The backlog count walks the unpublished rows (and, until vacuum, the entries their published
versions left in the partial index): in a burst of 250,000 events it took 0.5 s a call, and
the relay read it after every pass, once a second: half of its time went to counting while
nothing was published. A read is due ``interval`` after the last one ended, and never sooner
than its own cost allows: a read that took ``t`` seconds waits ``t * (1 - share) / share``,
so the gauges take at most ``share`` of the relay's time, however large the backlog."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

GAUGE_SHARE = 0.05
"""The most of the relay's time its backlog gauges may take."""


@dataclass(slots=True)
class GaugeSchedule:
    interval: float
    share: float = GAUGE_SHARE
    _due: float = field(default=-math.inf, init=False)

    def __post_init__(self) -> None:
        if not 0 < self.share < 1:
            raise ValueError(f"GaugeSchedule.share must be in (0, 1), got {self.share}")

    def due(self, now: float) -> bool:
        return now >= self._due

    def read(self, started: float, ended: float) -> None:
        """A read ran from ``started`` to ``ended`` (monotonic seconds): the next one waits."""
        took = max(0.0, ended - started)
        self._due = ended + max(self.interval, took * (1 - self.share) / self.share)

    @property
    def next_due(self) -> float:
        return self._due
