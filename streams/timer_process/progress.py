"""What the timer process's loops promised: each turn of a loop says by when its next turn
comes, so a loop that stops turning (an await that never returns) is seen as late."""

from __future__ import annotations

import time
from collections.abc import Callable


class Progress:
    """The latest promise of every loop of the child (a registry schedule, the relay).

    ``turn(source, within)`` is called by the loop itself; ``late()`` is what the beat sends:
    per source, the seconds left before its promise runs out (negative once it is late).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._due: dict[str, float] = {}

    def turn(self, source: str, within: float) -> None:
        self._due[source] = self._clock() + max(0.0, within)

    def left(self) -> dict[str, float]:
        now = self._clock()
        return {source: round(due - now, 3) for source, due in self._due.items()}
