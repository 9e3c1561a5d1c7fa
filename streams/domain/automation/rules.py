"""Automation scheduler rules (seed 003): candidates, the Ensure decision table and the
backoff ladder; the SchedulerKey formats and InputHash are in
``streams.domain.automation.keys`` (re-exported here). Pure: no I/O, no clock, no randomness."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from uuid import UUID

from streams.contracts.automation import AutomationType, TriggerType
from streams.domain.automation.keys import (
    HASH_VERSION,
    MAX_KEY_LENGTH,
    AutomationInput,
    ReminderDateInput,
    ReminderThresholdInput,
    ReportManualInput,
    ReportScheduledInput,
    component,
    input_hash,
    norm_instant,
    norm_number,
    norm_text,
    parse_instant,
    parse_scheduler_key,
    scheduler_key,
)


class SchedulerStatus(StrEnum):
    PENDING = "Pending"
    PROCESSING = "Processing"
    COMPLETED = "Completed"
    FAILED = "Failed"
    DEACTIVATED = "Deactivated"
    CANCELLED = "Cancelled"


# --- candidates ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SchedulerCandidate:
    """A row that should exist: its key and hash come from ``input``, never from a caller."""

    input: AutomationInput
    scheduled_on: datetime
    scheduled_local_date: date | None = None
    time_zone_id: str | None = None

    def __post_init__(self) -> None:
        if self.scheduled_on.tzinfo is None:
            raise ValueError("ScheduledOn must be timezone-aware (it is stored in UTC)")
        object.__setattr__(self, "scheduled_on", self.scheduled_on.astimezone(UTC))
        scheduler_key(self.input)  # refuses an over-long key early

    @property
    def key(self) -> str:
        return scheduler_key(self.input)

    @property
    def input_hash(self) -> str:
        return input_hash(self.input)

    @property
    def automation_type(self) -> AutomationType:
        return self.input.automation_type

    @property
    def trigger_type(self) -> TriggerType:
        return self.input.trigger_type

    @property
    def setting_guid(self) -> UUID | None:
        return getattr(self.input, "setting_guid", None)

    @property
    def source_type(self) -> str | None:
        value = getattr(self.input, "source_type", None)
        return None if value is None else norm_text(value)

    @property
    def source_guid(self) -> UUID | None:
        return getattr(self.input, "source_guid", None)

    @property
    def subscription_guid(self) -> UUID | None:
        return getattr(self.input, "subscription_guid", None)


def unique_by_key(candidates: list[SchedulerCandidate]) -> list[SchedulerCandidate]:
    """One candidate per key (the last wins for the schedule fields); two candidates of one
    key with different InputHashes in one batch are a caller's bug and are refused."""
    by_key: dict[str, SchedulerCandidate] = {}
    for c in candidates:
        seen = by_key.get(c.key)
        if seen is not None and seen.input_hash != c.input_hash:
            raise ValueError(f"one batch holds two inputs for SchedulerKey {c.key!r}")
        by_key[c.key] = c
    return list(by_key.values())


# --- Ensure: the seed's decision table -------------------------------------------------------


class EnsureOutcome(StrEnum):
    INSERTED = "Inserted"  # no row: insert
    REACTIVATED = "Reactivated"  # Failed/Deactivated/system Cancelled, same hash → Pending
    UPDATED = "Updated"  # Pending, same hash, new ScheduledOn/local date/zone: in place
    UNCHANGED = "Unchanged"  # Pending, same hash, same schedule: nothing to write
    IN_FLIGHT = "InFlight"  # Processing, same hash: the current claim finishes it
    ALREADY_COMPLETED = "AlreadyCompleted"  # Completed (or its history): never re-sent
    OPERATOR_CANCELLED = "OperatorCancelled"  # cancelled on the console: only it reopens
    CONFLICT = "Conflict"  # same key, different InputHash: support hold, never overwritten


MANUAL_CANCEL = "ManualCancel"
"""The ReasonCode of a console cancel: an operator's decision, terminal until an operator
reopens it (system cancellations carry other reasons and are reactivated by inputs)."""

REACTIVATABLE = frozenset(
    {SchedulerStatus.FAILED, SchedulerStatus.DEACTIVATED, SchedulerStatus.CANCELLED}
)


@dataclass(frozen=True)
class RowState:
    """What Ensure looks at in an existing row."""

    status: SchedulerStatus
    input_hash: str
    scheduled_on: datetime
    scheduled_local_date: date | None
    time_zone_id: str | None
    reason_code: str | None = None


def ensure_decision(existing: RowState | None, candidate: SchedulerCandidate) -> EnsureOutcome:
    """The seed's Ensure table. Reactivation keeps diagnostics, attempts and dispatch
    coordinates and never lifts a support hold (support does that)."""
    if existing is None:
        return EnsureOutcome.INSERTED
    # A Completed row is history: it returns its coordinates whatever the candidate's hash
    # (the seed's "Completed → never re-sent" wins); only a live row is held on a mismatch.
    if existing.status is SchedulerStatus.COMPLETED:
        return EnsureOutcome.ALREADY_COMPLETED
    # An operator's cancel is terminal, whatever the input: a changed occurrence is a new key
    # (a new row); the same key with another hash has nothing left to send, so nothing to hold.
    if existing.status is SchedulerStatus.CANCELLED and existing.reason_code == MANUAL_CANCEL:
        return EnsureOutcome.OPERATOR_CANCELLED
    if existing.input_hash != candidate.input_hash:
        return EnsureOutcome.CONFLICT
    if existing.status is SchedulerStatus.PROCESSING:
        return EnsureOutcome.IN_FLIGHT
    if existing.status in REACTIVATABLE:
        return EnsureOutcome.REACTIVATED
    same = (
        existing.scheduled_on == candidate.scheduled_on
        and existing.scheduled_local_date == candidate.scheduled_local_date
        and existing.time_zone_id == candidate.time_zone_id
    )
    return EnsureOutcome.UNCHANGED if same else EnsureOutcome.UPDATED


# --- backoff ladder --------------------------------------------------------------------------

DEFAULT_BACKOFF: tuple[timedelta, ...] = (
    timedelta(minutes=5),
    timedelta(minutes=15),
    timedelta(hours=1),
)
DAILY_RETRY = timedelta(days=1)


@dataclass(frozen=True)
class RetryPlan:
    """Where a failed or abandoned attempt leaves the row."""

    retry_count: int
    status: SchedulerStatus
    next_retry_on: datetime | None
    hold: bool


def retry_plan(
    retry_count: int,
    now: datetime,
    ladder: tuple[timedelta, ...] = DEFAULT_BACKOFF,
    *,
    daily_retry: bool = False,
) -> RetryPlan:
    """Attempt ``retry_count + 1`` failed: wait the ladder's next step (5 min → 15 min →
    1 h), then support hold (Failed, IsOnSupportHold). Only a handler approved as
    long-running (``daily_retry``) goes on retrying once a day instead of being held."""
    n = retry_count + 1
    if n <= len(ladder):
        return RetryPlan(n, SchedulerStatus.PENDING, now + ladder[n - 1], False)
    if daily_retry:
        return RetryPlan(n, SchedulerStatus.PENDING, now + DAILY_RETRY, False)
    return RetryPlan(n, SchedulerStatus.FAILED, None, True)


# --- interruptions: a claim that ended without a verdict ----------------------------------------

# Interruptions a row may have before they count as attempts (a database blip must never
# cost an attempt): more than the four short outages that put healthy rows on hold, few
# enough that a row which kills its worker every time is held after
# ``allowance + len(ladder) + 1`` dead workers.
DEFAULT_INTERRUPTION_ALLOWANCE = 5
DEFAULT_INTERRUPTION_DELAY = timedelta(seconds=15)


@dataclass(frozen=True)
class InterruptionPlan:
    """Where an interrupted claim leaves the row: ``charged`` when it counted as an attempt."""

    interrupted_count: int
    charged: bool
    step: RetryPlan


def interruption_plan(
    retry_count: int,
    interrupted_count: int,
    now: datetime,
    ladder: tuple[timedelta, ...] = DEFAULT_BACKOFF,
    *,
    allowance: int = DEFAULT_INTERRUPTION_ALLOWANCE,
    delay: timedelta = DEFAULT_INTERRUPTION_DELAY,
    daily_retry: bool = False,
) -> InterruptionPlan:
    """A claim ended with no verdict (a transient database error, a cancelled run, an expired
    lease): the infrastructure failed, not the row. Within ``allowance`` the row is due again
    after ``delay`` with RetryCount unchanged; past it, each interruption is a failed attempt
    on the ladder (``retry_plan``), so a row that never gets a verdict still reaches hold."""
    n = interrupted_count + 1
    if n <= allowance:
        return InterruptionPlan(
            n, False, RetryPlan(retry_count, SchedulerStatus.PENDING, now + delay, False)
        )
    return InterruptionPlan(n, True, retry_plan(retry_count, now, ladder, daily_retry=daily_retry))


def parse_ladder(text: str) -> tuple[timedelta, ...]:
    """``"300,900,3600"`` (seconds) → the ladder; ValueError on anything else."""
    steps = [s.strip() for s in text.split(",")]
    if not steps or any(not s for s in steps):
        raise ValueError("must be a comma-separated list of seconds, e.g. 300,900,3600")
    values = [float(s) for s in steps]
    if any(not math.isfinite(v) or v <= 0 for v in values):
        raise ValueError("every backoff step must be a positive number of seconds")
    return tuple(timedelta(seconds=v) for v in values)


__all__ = [
    "DAILY_RETRY",
    "DEFAULT_BACKOFF",
    "DEFAULT_INTERRUPTION_ALLOWANCE",
    "DEFAULT_INTERRUPTION_DELAY",
    "HASH_VERSION",
    "MANUAL_CANCEL",
    "MAX_KEY_LENGTH",
    "REACTIVATABLE",
    "AutomationInput",
    "EnsureOutcome",
    "InterruptionPlan",
    "ReminderDateInput",
    "ReminderThresholdInput",
    "ReportManualInput",
    "ReportScheduledInput",
    "RetryPlan",
    "RowState",
    "SchedulerCandidate",
    "SchedulerStatus",
    "component",
    "ensure_decision",
    "input_hash",
    "interruption_plan",
    "norm_instant",
    "norm_number",
    "norm_text",
    "parse_instant",
    "parse_ladder",
    "parse_scheduler_key",
    "retry_plan",
    "scheduler_key",
    "unique_by_key",
]
