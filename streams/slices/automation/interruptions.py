"""The write of a claim that ended without a verdict (a transient database error, a run
cancelled or out of time, an expired lease): one rule for the runner's hand-back and the
stale cleanup (``interruption_plan``: RetryCount kept within the allowance, an attempt on
the backoff ladder once it is spent)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from db.scheduler import RetryWrite
from streams.domain.automation.rules import interruption_plan
from streams.slices.automation.handlers import HandlerRegistry


class Interrupted(Protocol):
    """A claimed row as both the runner and the cleanup know it."""

    @property
    def scheduler_id(self) -> int: ...
    @property
    def automation_type(self) -> str: ...
    @property
    def retry_count(self) -> int: ...
    @property
    def interrupted_count(self) -> int: ...
    @property
    def token(self) -> int: ...


class InterruptionRules(Protocol):
    @property
    def backoff(self) -> tuple[timedelta, ...]: ...
    @property
    def interruption_allowance(self) -> int: ...
    @property
    def interruption_delay(self) -> timedelta: ...


def interruption_write(
    row: Interrupted,
    now: datetime,
    rules: InterruptionRules,
    handlers: HandlerRegistry,
    *,
    reason: str,
    error: str,
) -> RetryWrite:
    """Where ``row`` goes back to; ``reason`` and ``error`` are recorded only when the
    interruption is charged as an attempt."""
    handler = handlers.get(row.automation_type)
    plan = interruption_plan(
        row.retry_count,
        row.interrupted_count,
        now,
        rules.backoff,
        allowance=rules.interruption_allowance,
        delay=rules.interruption_delay,
        daily_retry=bool(handler is not None and handler.daily_retry),
    )
    step = plan.step
    return RetryWrite(
        row.scheduler_id,
        row.token,
        step.status.value,
        step.retry_count,
        step.next_retry_on,
        step.hold,
        reason if plan.charged else None,
        error[:500] if plan.charged else None,
        None,
        plan.interrupted_count,
    )
