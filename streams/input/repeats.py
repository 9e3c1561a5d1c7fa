"""A failure that repeats: the input loop counts identical "database unavailable" failures
of one apply in a row (``SameFailures``); enough of them while the database answers a probe
say the input's own work fails (``RepeatedFailure``), which is dead-lettered, not retried
forever. Contention (another transaction in the way) never counts."""

from __future__ import annotations

from streams.errors import SafeMessage, describe

# Lock not available, serialization failure, deadlock: another transaction in the way.
CONTENTION = frozenset({"55P03", "40001", "40P01"})


class RepeatedFailure(SafeMessage, Exception):
    """The same "database unavailable" failure, attempt after attempt, while the database
    answers: the input's own work fails (a statement that times out on it, a session ended
    by its transaction's length), so it is dead-lettered with this reason, not retried
    forever. Its message is value-free (counts and ``describe`` of the failure)."""

    def __init__(self, attempts: int, exc: BaseException) -> None:
        super().__init__(
            f"the same failure {attempts} times in a row while the database answered: "
            f"{describe(exc)}"
        )


class SameFailures:
    """Identical failures in a row: same cause, class and SQLSTATE, contention excluded."""

    def __init__(self) -> None:
        self._last: tuple[str, str, str] | None = None
        self.count = 0

    def add(self, cause: str, exc: BaseException) -> int:
        """Count ``exc``; the identical failures in a row it makes (1 after another one)."""
        state = getattr(exc, "sqlstate", None) or "-"
        seen = (cause, type(exc).__name__, state)
        repeated = seen == self._last and state not in CONTENTION
        self.count = self.count + 1 if repeated else 1
        self._last = seen
        return self.count
