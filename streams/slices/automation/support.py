"""Support: rows on hold (for /status, /automation/hold and the CLI) and the two commands
that put a held row back — ``release`` (one more attempt, the ladder position kept) and
``retry-key`` (the key retried from a fresh ladder). Both are recorded in the row."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from enum import StrEnum
from typing import Any

from prometheus_client import Counter

from db import console_audit
from db import fanout_progress as fanout_repo
from db import scheduler as repo
from db.connector import DatabaseUnavailable, InputRejected, Pool, connection, transaction
from db.scheduler import SchedulerRow
from streams import logs
from streams.console.activity import activity_of
from streams.contracts import DISPATCH_REQUESTED
from streams.runtime import Runtime
from streams.slices.automation.metrics import AutomationMetrics

log = logging.getLogger("streams.slices.automation.support")

# Rows listed in the /status section (the full list is /automation/hold).
STATUS_HOLD_ROWS = 20


class SupportAction(StrEnum):
    RELEASE = "release"
    RETRY_KEY = "retry-key"


def row_view(row: SchedulerRow) -> dict[str, Any]:
    """A row as JSON-able data: identifiers, statuses, hashes and diagnostics (no input)."""

    def iso(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    return {
        "scheduler_id": row.scheduler_id,
        "scheduler_key": row.scheduler_key,
        "automation_type": row.automation_type_id,
        "trigger_type": row.trigger_type_id,
        "status": row.status_id,
        "status_reason": row.status_reason_code,
        "on_hold": row.is_on_support_hold,
        "hold_reason": row.failure_reason_code,
        "attempts": row.retry_count,
        # Claims that ended without a verdict (no attempt while within the allowance).
        "interruptions": row.interrupted_count,
        "last_error": row.last_error,
        "next_retry_on": iso(row.next_retry_on),
        "scheduled_on": iso(row.scheduled_on),
        "input_hash": row.input_hash,
        "conflict_input_hash": row.conflict_input_hash,
        "dispatch_result": row.dispatch_result_json,
        "support_action": row.support_action,
        "support_action_on": iso(row.support_action_on),
        "support_action_count": row.support_action_count,
        "version": row.version,
        "updated_on": iso(row.updated_on),
    }


async def held_rows(pool: Pool, limit: int) -> list[dict[str, Any]]:
    async with connection(pool) as conn:
        return [row_view(r) for r in await repo.list_held(conn, limit)]


async def put_back(
    pool: Pool,
    key: str,
    action: SupportAction,
    now: datetime,
    *,
    actor: str = "support",
    reason: str = "",
) -> SchedulerRow | None:
    """Lift the hold of ``key`` (None when no such row is on hold); audited in
    ``ops.console_audit`` in the same transaction, as the console's release is."""
    async with transaction(pool) as conn:
        row = await repo.release(conn, key, action.value, action is SupportAction.RETRY_KEY, now)
        await console_audit.record(
            conn,
            now,
            actor,
            action.value,
            "automation/scheduler",
            str(row.scheduler_id) if row is not None else key,
            reason,
            "changed" if row is not None else "refused",
            {"scheduler_key": key, **({"status": row.status_id} if row is not None else {})},
        )
    if row is not None:
        logs.event(
            log,
            logging.INFO,
            "automation_support_" + action.value.replace("-", "_"),
            scheduler_id=row.scheduler_id,
            status=row.status_id,
            retry_count=row.retry_count,
        )
    return row


def status_section(
    runtime: Runtime, metrics: AutomationMetrics
) -> Callable[[], Awaitable[dict[str, Any]]]:
    """The /status "automation" section: live gauges and the newest rows on hold."""

    def total(counter: Counter, **labels: str) -> float:
        return sum(
            s.value
            for m in counter.collect()
            for s in m.samples
            if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items())
        )

    activity = activity_of(runtime, DISPATCH_REQUESTED.name)

    async def section() -> dict[str, Any]:
        fenced = total(metrics.fenced)
        # Claims of this worker that ended without a verdict, and those that cost an attempt.
        interrupted = {
            "interrupted": total(metrics.interrupted),
            "interrupted_charged": total(metrics.interrupted, charged="true"),
        }
        try:
            pool = await runtime.pool()
            now = runtime.clock.now()
            async with connection(pool) as conn:
                stats = await repo.backlog_stats(conn, now)
                held = [row_view(r) for r in await repo.list_held(conn, STATUS_HOLD_ROWS)]
                fanouts, parked = await fanout_repo.counts(conn)
        except (DatabaseUnavailable, InputRejected) as exc:
            return {
                "error": f"database unavailable ({type(exc).__name__})",
                "fenced": fenced,
                **interrupted,
            }
        earliest = stats.earliest_due_on
        return {
            "due_backlog": stats.due_backlog,
            "oldest_due_age_seconds": (
                (now - earliest).total_seconds() if earliest and earliest <= now else 0.0
            ),
            "processing": stats.processing,
            "on_hold": stats.on_hold,
            "fenced": fenced,
            **interrupted,
            "held": held,
            "hold_view": "/automation/hold",
            # Setting fan-outs the drainer has yet to finish, and those parked with a reason
            # (`python -m streams automation fanouts`).
            "fanouts_in_progress": fanouts,
            "fanouts_parked": parked,
            "activity": await activity(),
        }

    return section
