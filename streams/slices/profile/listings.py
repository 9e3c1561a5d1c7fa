"""The document-expiry slice's rows in the operators' console: the markers (one per reminder
sent for a document and threshold) and the runs (one per daily or manual run)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from db import document_expiry_reminders as markers_repo
from db import document_expiry_runs as runs_repo
from db.connector import connection
from streams.console.lineage import records_of
from streams.console.listing import Listing, Query
from streams.runtime import Runtime


async def marker_page(conn: Any, q: Query) -> list[dict[str, Any]]:
    if q.owner is not None:
        return await markers_repo.console_of_owner(conn, q.owner, q.bound, q.end, q.limit)
    return await markers_repo.console_page(conn, q.bound, q.end, q.limit)


async def marker_counts(conn: Any, cap: int) -> dict[str, int]:
    return {"Sent": await markers_repo.console_count(conn, cap)}


async def marker_detail(runtime: Runtime, marker_id: UUID) -> dict[str, Any] | None:
    async with connection(await runtime.pool()) as conn:
        row = await markers_repo.console_get(conn, marker_id)
        if row is None:
            return None
        document = str(row["document_id"])

        def mine(payload: dict[str, Any]) -> bool:
            # The owner's events (keyed by OwnerUserId) that list this document at this
            # threshold.
            return any(
                d.get("DocumentId") == document and d.get("ThresholdDays") == row["threshold_days"]
                for d in payload.get("Documents", [])
            )

        records = await records_of(conn, str(row["owner_user_id"]), mine)
    return {
        "row": row,
        "attempts": None,
        "last_error": None,
        "outbox": records,
        "lineage": {
            "document_id": document,
            "owner_user_id": str(row["owner_user_id"]),
            "outbox_key": str(row["owner_user_id"]),
            "note": "the marker is written in the transaction of the owner's event",
        },
    }


async def run_page(conn: Any, q: Query) -> list[dict[str, Any]]:
    return await runs_repo.console_page(conn, q.state, q.bound, q.end, q.limit)


async def run_counts(conn: Any, cap: int) -> dict[str, int]:
    return await runs_repo.console_counts(conn)


async def run_detail(runtime: Runtime, run_id: str) -> dict[str, Any] | None:
    async with connection(await runtime.pool()) as conn:
        run = await runs_repo.get(conn, run_id)
    if run is None:
        return None
    row = {name: getattr(run, name) for name in runs_repo.RunRow.__dataclass_fields__}
    row["state"] = (
        "Unfinished"
        if run.finished_at is None
        else "WithFailures"
        if run.owners_failed
        else "Finished"
    )
    return {
        "row": row,
        "attempts": None,
        "last_error": f"{run.owners_failed} owner(s) failed" if run.owners_failed else None,
        "outbox": [],
        "lineage": {
            "timer": "document-expiry",
            "slot": run.slot,
            "note": "its events are the owners' (profile/expiry-markers, filter owner); "
            "each carries this run id as its correlation-id header",
        },
    }


MARKERS = Listing(
    name="profile/expiry-markers",
    title="Document expiry markers",
    table="profile.document_expiry_reminders",
    states=("Sent",),
    time_column="reminded_at",
    id_column="id",
    id_kind="uuid",
    columns=(
        "id",
        "reminded_at",
        "owner_user_id",
        "document_id",
        "type",
        "threshold_days",
        "expires_at",
    ),
    page=marker_page,
    counts=marker_counts,
    detail=marker_detail,
    filters=("owner",),
    about="One row per (document, threshold) reminded: a marker exists only once its "
    "reminder is in the outbox (insert-wins).",
)

RUNS = Listing(
    name="profile/expiry-runs",
    title="Document expiry runs",
    table="profile.document_expiry_runs",
    states=("Finished", "WithFailures", "Unfinished"),
    time_column="started_at",
    id_column="run_id",
    id_kind="text",
    columns=(
        "run_id",
        "started_at",
        "state",
        "as_of_date",
        "owners_total",
        "owners_done",
        "owners_failed",
        "owners_notified",
        "reminders_sent",
        "finished_at",
        "duration_ms",
    ),
    page=run_page,
    counts=run_counts,
    detail=run_detail,
    newest_first=True,
    about="One row per run; Unfinished: no finished_at (running, or stopped before it "
    "finished); WithFailures: finished with failed owners.",
)

LISTINGS = (MARKERS, RUNS)
