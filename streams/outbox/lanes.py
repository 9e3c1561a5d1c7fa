"""Lane cool-down, pure and clock-driven: which lanes a relay leaves alone, which it probes.

A lane whose row Kafka refused cools down with exponential backoff; once due again it is
*probed*: only its head row is sent, and the rest of the lane follows after the head is
accepted. So a poison row is retried with backoff without re-sending the rows behind it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable


class LaneCooldown:
    def __init__(self, max_backoff: float, first_backoff: float = 0.25) -> None:
        self.max_backoff = max_backoff
        self.first_backoff = first_backoff
        self._failures: dict[int, int] = {}
        self._resume_at: dict[int, float] = {}

    def backoff(self, attempt: int) -> float:
        """Delay after the ``attempt``-th consecutive failure (1-based), capped."""
        return float(min(self.max_backoff, self.first_backoff * 2 ** min(attempt - 1, 16)))

    def paused(self, now: float) -> list[int]:
        """Lanes to leave alone at monotonic time ``now``."""
        return [lane for lane, until in self._resume_at.items() if until > now]

    def probing(self, lanes: Iterable[int]) -> set[int]:
        """Of ``lanes``, those that failed before: only their head row is sent."""
        return {lane for lane in lanes if lane in self._failures}

    def track(
        self, lanes: Iterable[int], refused: Collection[int], failed: Collection[int], now: float
    ) -> None:
        """After a pass: refused lanes cool down longer; lanes that went through are healthy;
        lanes held back by a failed producer keep their state (retried by the next one)."""
        for lane in lanes:
            if lane in refused:
                n = self._failures.get(lane, 0) + 1
                self._failures[lane] = n
                self._resume_at[lane] = now + self.backoff(n)
            elif lane not in failed:
                self._failures.pop(lane, None)
                self._resume_at.pop(lane, None)
