"""What one executed batch of scheduler rows writes: the DispatchRequested of a valid row
(``dispatch_event``), and from every row's outcome its transition (``plan_batch``):
completion with its outbox record, deactivation, support hold, or a failed attempt on the
backoff ladder (``failure_write``). Pure: the runner writes the plan in its transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from db.scheduler import ClaimedRow, RetryWrite
from streams import logs
from streams.contracts import DISPATCH_REQUESTED
from streams.contracts.automation import AutomationType, DispatchRequested, TriggerType
from streams.domain.automation.delivery import Delivery
from streams.domain.automation.immediate import is_immediate_key
from streams.domain.automation.revalidation import Verdict, VerdictKind
from streams.domain.automation.rules import SchedulerStatus, retry_plan
from streams.outbox.records import OutboxRecord, RecordMaker
from streams.slices.automation.handlers import (
    INVALID_DISPATCH,
    Failure,
    HandlerRegistry,
    Outcome,
    delivery_of,
)

log = logging.getLogger("streams.slices.automation.runner")


def dispatch_event(
    row: ClaimedRow, requested_at: datetime, delivery: Delivery | None = None
) -> DispatchRequested:
    """The DispatchRequested of a claimed row: identifiers and hashes only, and what the
    handler resolved at execution (recipients, template, channels)."""
    resolved = delivery or Delivery()
    return DispatchRequested(
        scheduler_key=row.scheduler_key,
        automation_type=AutomationType(row.automation_type),
        trigger_type=TriggerType(row.trigger_type),
        setting_guid=row.setting_guid,
        source_type=row.source_type,
        source_guid=row.source_guid,
        subscription_guid=row.subscription_guid,
        scheduled_on=row.scheduled_on,
        scheduled_local_date=row.scheduled_local_date,
        time_zone_id=row.time_zone_id,
        input_hash=row.input_hash,
        requested_at=requested_at,
        retry_count=row.retry_count,
        recipient_user_ids=list(resolved.recipient_user_ids),
        template_id=resolved.template_id,
        delivery_channels=list(resolved.channels),
        immediate=is_immediate_key(row.scheduler_key),
    )


@dataclass
class BatchPlan:
    """What one executed batch writes, by transition."""

    completions: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)
    records: dict[int, OutboxRecord] = field(default_factory=dict)
    retires: list[tuple[int, int, str]] = field(default_factory=list)
    retries: list[RetryWrite] = field(default_factory=list)


def plan_batch(
    rows: list[ClaimedRow],
    outcomes: Mapping[int, Outcome],
    now: datetime,
    run_id: str,
    *,
    topic_prefix: str,
    backoff: tuple[timedelta, ...],
    handlers: HandlerRegistry,
) -> BatchPlan:
    """Each row's transition from its outcome: a valid verdict completes it with its
    DispatchRequested (a request that cannot be built is an attempt failed with
    InvalidDispatch), a deactivate verdict retires it, a hold verdict keeps it Pending on
    support hold (never sent on a guess), a failure moves it on the backoff ladder."""
    plan = BatchPlan()
    make = RecordMaker(
        DISPATCH_REQUESTED, topic_prefix=topic_prefix, headers={"correlation-id": run_id}
    )
    for row in rows:
        outcome = outcomes[row.scheduler_id]
        if isinstance(outcome, Verdict) and outcome.kind is VerdictKind.VALID:
            try:
                record = make(dispatch_event(row, now, delivery_of(outcome)))
            except Exception as exc:
                outcome = Failure(INVALID_DISPATCH, type(exc).__name__)
            else:
                coordinates = {
                    "Topic": record.topic,
                    "Key": record.key,
                    "RequestedAt": now.isoformat(),
                    "Attempt": row.retry_count + 1,
                    "RunId": run_id,
                }
                plan.completions.append((row.scheduler_id, row.token, coordinates))
                plan.records[row.scheduler_id] = record
                continue
        if isinstance(outcome, Verdict) and outcome.kind is VerdictKind.DEACTIVATE:
            plan.retires.append((row.scheduler_id, row.token, outcome.reason or ""))
        elif isinstance(outcome, Verdict):  # HOLD: never sent on a guess
            plan.retries.append(
                RetryWrite(
                    row.scheduler_id,
                    row.token,
                    SchedulerStatus.PENDING.value,
                    row.retry_count,
                    None,
                    True,
                    outcome.reason,
                    None,
                    outcome.current_hash,
                )
            )
        elif isinstance(outcome, Failure):
            plan.retries.append(failure_write(row, outcome, now, backoff, handlers))
    return plan


def failure_write(
    row: ClaimedRow,
    failure: Failure,
    now: datetime,
    backoff: tuple[timedelta, ...],
    handlers: HandlerRegistry,
) -> RetryWrite:
    """The write of a failed attempt: the next step of the backoff ladder (daily retries
    after it only for a handler approved as long-running, else support hold)."""
    handler = handlers.get(row.automation_type)
    step = retry_plan(
        row.retry_count,
        now,
        backoff,
        daily_retry=bool(handler is not None and handler.daily_retry),
    )
    logs.event(
        log,
        logging.WARNING,
        "automation_attempt_failed",
        scheduler_id=row.scheduler_id,
        reason=failure.code,
        retry_count=step.retry_count,
        hold=step.hold,
    )
    return RetryWrite(
        row.scheduler_id,
        row.token,
        step.status.value,
        step.retry_count,
        step.next_retry_on,
        step.hold,
        failure.code,
        (failure.detail or failure.code)[:500],
    )
