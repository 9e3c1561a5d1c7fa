"""The calendar slice's rows in the operators' console: reminder rows by state (Pending, the
Pending rows retrying after failed dispatch attempts, Sent, Skipped)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from db import event_reminders as repo
from db.connector import connection
from streams.console.lineage import delivery
from streams.console.listing import Listing, Query
from streams.runtime import Runtime


async def page(conn: Any, q: Query) -> list[dict[str, Any]]:
    if q.owner is not None:
        return await repo.console_by_owner(
            conn, q.state, q.bound, q.end, q.limit, q.tenant, q.owner
        )
    args = (q.bound, q.end, q.limit, None, None)
    if q.state == "Pending":
        return await repo.console_pending(conn, *args)
    if q.state == "Retrying":
        return await repo.console_retrying(conn, *args)
    return await repo.console_done(conn, q.state, *args)


async def counts(conn: Any, cap: int) -> dict[str, int]:
    return await repo.console_counts(conn, cap)


async def detail(runtime: Runtime, reminder_id: UUID) -> dict[str, Any] | None:
    from streams.explain import explain  # the slices' explain: imported once they exist

    async with connection(await runtime.pool()) as conn:
        row = await repo.explain(conn, reminder_id)
    if row is None:
        return None
    story = await explain(runtime, str(reminder_id))
    records = (story or {}).get("outbox", [])
    for record in records:
        record["delivery"] = delivery(record)
    return {
        "row": row,
        "attempts": row["attempts"],
        "last_error": row["last_error_code"],
        "outbox": records,
        # explain's story of the row, its outbox records above.
        "lineage": {k: v for k, v in story.items() if k != "outbox"} if story else None,
    }


REMINDERS = Listing(
    name="calendar/reminders",
    title="Calendar reminders",
    table="calendar.event_reminders",
    states=("Pending", "Retrying", "Sent", "Skipped"),
    time_column="due_at",
    id_column="reminder_id",
    id_kind="uuid",
    columns=(
        "reminder_id",
        "due_at",
        "status",
        "offset_minutes",
        "event_id",
        "tenant_id",
        "owner_user_id",
        "attempts",
        "last_error_code",
        "next_attempt_at",
        "sent_at",
        "skip_reason",
    ),
    page=page,
    counts=counts,
    detail=detail,
    filters=("tenant", "owner"),
    requires=(("tenant", "owner"),),
    about="One row per (event, offset, due time); Retrying: Pending rows whose dispatch "
    "failed (poison rows, backing off until next_attempt_at).",
)

LISTINGS = (REMINDERS,)
