"""Retries of cluster-once slots: which ends release a slot, the backoff, the attempt bound.

Pure functions over plain data; SlotLeases applies what they return. A released slot keeps
its row and its key (``name:scheduledAt``), so whatever the handler derives from the slot
(outbox correlation, per-owner keys) is the same on every attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from streams.errors import SafeMessage

# Ends of a run that may be retried; ok is always final.
RETRYABLE = frozenset({"failed", "timeout", "cancelled"})
DEFAULT_ATTEMPTS = 3
DEFAULT_BACKOFF = timedelta(seconds=60)
# Validation bounds of the per-schedule settings.
MAX_ATTEMPTS = 20
MAX_BACKOFF = timedelta(hours=6)


class HandBack(SafeMessage, Exception):
    """Raised by a handler that stops before its work is done (the worker is stopping): the
    slot is handed back, not finished, and no attempt is counted."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often a cluster-once slot is tried (``attempts`` in all) and the first backoff
    (doubling per counted attempt, capped at MAX_BACKOFF)."""

    attempts: int = DEFAULT_ATTEMPTS
    backoff: timedelta = DEFAULT_BACKOFF

    def __post_init__(self) -> None:
        if not 1 <= self.attempts <= MAX_ATTEMPTS:
            raise ValueError(f"attempts must be in 1..{MAX_ATTEMPTS}, got {self.attempts}")
        if not timedelta(0) <= self.backoff <= MAX_BACKOFF:
            raise ValueError(f"backoff must be in 0..{MAX_BACKOFF}, got {self.backoff}")


def retry_backoff(policy: RetryPolicy, attempt: int) -> timedelta:
    """The wait after the ``attempt``-th counted attempt failed: backoff, doubling, capped."""
    return min(policy.backoff * (1 << min(max(attempt - 1, 0), 16)), MAX_BACKOFF)


@dataclass(frozen=True)
class SlotEnd:
    """What to do with a slot whose run just ended."""

    # True: finish the slot with the run's result. False: release it until next_attempt_at.
    final: bool
    # The attempt is counted (a hand-back is not).
    counted: bool
    # Attempts ended, this one included when counted.
    attempts: int
    next_attempt_at: datetime | None = None
    # A failure that used up the last attempt (the slot is given up).
    given_up: bool = False

    @property
    def handed_back(self) -> bool:
        return not self.final and not self.counted


def slot_end(
    result: str,
    attempts_before: int,
    policy: RetryPolicy,
    now: datetime,
    *,
    stopping: bool = False,
    handed_back: bool = False,
) -> SlotEnd:
    """Decide the end of one run of a slot that ``attempts_before`` earlier attempts ended.

    ok is final. A run that did not end ok while the worker stops (or that handed its slot
    back itself) is released at once, uncounted: the next worker to look runs it. Otherwise
    failed, timeout and cancelled are released after the backoff until the bound is reached,
    then final (given up).
    """
    if result == "ok":
        return SlotEnd(True, True, attempts_before + 1)
    if handed_back or (stopping and result in RETRYABLE):
        return SlotEnd(False, False, attempts_before, now)
    attempts = attempts_before + 1
    if result not in RETRYABLE or attempts >= policy.attempts:
        return SlotEnd(True, True, attempts, given_up=result in RETRYABLE)
    return SlotEnd(False, True, attempts, now + retry_backoff(policy, attempts))
