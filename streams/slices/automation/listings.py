"""The automation slice's rows in the operators' console: scheduler rows by status, and the
rows on support hold (whatever their status)."""

from __future__ import annotations

from typing import Any

from db import scheduler_console as repo
from db.connector import connection
from streams.console.lineage import records_of
from streams.console.listing import Listing, Query, prefix_range
from streams.runtime import Runtime

STATUSES = ("Pending", "Processing", "Completed", "Failed", "Deactivated", "Cancelled")


async def page(conn: Any, q: Query) -> list[dict[str, Any]]:
    if q.state == "OnHold":
        return await repo.on_hold(conn, q.bound, q.end, q.limit, q.key_prefix, q.bu)
    # Each filter on its own index (db/queries/scheduler_console.sql).
    keys = prefix_range(q.key_prefix) if q.key_prefix is not None else None
    if q.bu is not None:
        return await repo.page_by_business_unit(conn, q.state, q.bound, q.end, q.limit, q.bu, keys)
    if keys is not None:
        return await repo.page_by_key_prefix(conn, q.state, q.bound, q.end, q.limit, keys)
    return await repo.page(conn, q.state, q.bound, q.end, q.limit)


async def counts(conn: Any, cap: int) -> dict[str, int]:
    return await repo.counts(conn, cap)


async def detail(runtime: Runtime, scheduler_id: int) -> dict[str, Any] | None:
    async with connection(await runtime.pool()) as conn:
        row = await repo.get(conn, scheduler_id)
        if row is None:
            return None
        key = str(row["scheduler_key"])
        # DispatchRequested is keyed by SchedulerKey, one message per Completed row.
        records = await records_of(conn, key, lambda p: p.get("SchedulerKey") == key)
    return {
        "row": row,
        "attempts": row["retry_count"],
        "last_error": row["last_error"] or row["failure_reason_code"],
        "outbox": records,
        "lineage": {
            "inputs": {
                "setting_guid": row["setting_guid"],
                "source_type": row["source_type"],
                "source_guid": row["source_guid"],
                "subscription_guid": row["subscription_guid"],
                "input_hash": row["input_hash"],
            },
            "dispatch": row["dispatch_result_json"],
            "support": {
                "on_hold": row["is_on_support_hold"],
                "action": row["support_action"],
                "action_on": row["support_action_on"],
                "actions": row["support_action_count"],
            },
            "interruptions": row["interrupted_count"],
        },
    }


SCHEDULER = Listing(
    name="automation/scheduler",
    title="Automation scheduler rows",
    table="automation.scheduler",
    states=(*STATUSES, "OnHold"),
    time_column="scheduled_on",
    id_column="scheduler_id",
    id_kind="int",
    columns=(
        "scheduler_id",
        "scheduled_on",
        "status_id",
        "scheduler_key",
        "automation_type_id",
        "trigger_type_id",
        "retry_count",
        "next_retry_on",
        "failure_reason_code",
        "last_error",
        "is_on_support_hold",
        "status_reason_code",
    ),
    page=page,
    counts=counts,
    detail=detail,
    filters=("bu", "key_prefix"),
    about="One row per SchedulerKey; OnHold: rows on support hold, whatever their status "
    "(put back with automation release / retry-key).",
)

LISTINGS = (SCHEDULER,)
