"""What happened to one reminder or one calendar event: the input message that produced it,
the row and its transitions, and the outbox records with where Kafka put them."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from uuid import UUID

from db import event_reminders as reminders_repo
from db import events as events_repo
from db import outbox as outbox_repo
from db.connector import connection
from streams.contracts import CALENDAR_EVENTS
from streams.runtime import Runtime

# Outbox records of one event looked at (they are kept for OUTBOX_RETENTION_HOURS).
MAX_RECORDS = 200


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _input(runtime: Runtime, partition: Any, offset: Any, version: Any) -> dict[str, Any]:
    return {
        "topic": runtime.settings.topic(CALENDAR_EVENTS.name),
        "partition": partition,
        "offset": offset,
        "version": version,
    }


def _records(found: list[outbox_repo.KeyRecord], reminder_id: str | None) -> list[dict[str, Any]]:
    out = []
    for r in found:
        if reminder_id is not None and json.loads(r.payload).get("ReminderId") != reminder_id:
            continue
        out.append(
            {
                "outbox_id": r.id,
                "topic": r.topic,
                "created_at": _iso(r.created_at),
                "published_at": _iso(r.published_at),
                "partition": r.published_partition,
                "offset": r.published_offset,
                # Kafka refused it for good: python -m streams outbox parked|retry|drop.
                **({"parked": r.parked_reason} if r.parked_reason else {}),
            }
        )
    return out


def _history(row: dict[str, Any]) -> list[dict[str, Any]]:
    steps = [{"at": _iso(row["created_at"]), "status": "Pending"}]
    if row["status"] == "Sent":
        steps.append({"at": _iso(row["sent_at"]), "status": "Sent"})
    elif row["status"] != "Pending" or row["updated_at"] != row["created_at"]:
        steps.append(
            {"at": _iso(row["updated_at"]), "status": row["status"], "reason": row["skip_reason"]}
        )
    return steps


async def explain(runtime: Runtime, ident: str) -> dict[str, Any] | None:
    """A ReminderId or an EventId; None when it is neither."""
    try:
        key = UUID(ident)
    except ValueError:
        return None
    pool = await runtime.pool()
    async with connection(pool) as conn:
        reminder = await reminders_repo.explain(conn, key)
        if reminder is not None:
            event_id = str(reminder["event_id"])
            found = await outbox_repo.records_of_key(conn, event_id, MAX_RECORDS)
            return {
                "kind": "calendar reminder",
                "id": ident,
                "event_id": event_id,
                "input": _input(
                    runtime,
                    reminder["source_partition"],
                    reminder["source_offset"],
                    reminder["source_version"],
                ),
                "row": {
                    "status": reminder["status"],
                    "due_at": _iso(reminder["due_at"]),
                    "offset_minutes": reminder["offset_minutes"],
                    "skip_reason": reminder["skip_reason"],
                    "event_version": reminder["event_version"],
                    "event_status": reminder["event_status"],
                },
                # Failed dispatch attempts (a poison row stays Pending and backs off).
                "dispatch": {
                    "attempts": reminder["attempts"],
                    "next_attempt_at": _iso(reminder["next_attempt_at"]),
                    "last_error_code": reminder["last_error_code"],
                },
                "history": _history(reminder),
                "outbox": _records(found, ident),
            }
        event = await events_repo.explain(conn, key)
        if event is None:
            return None
        found = await outbox_repo.records_of_key(conn, ident, MAX_RECORDS)
        return {
            "kind": "calendar event",
            "id": ident,
            "input": _input(
                runtime, event["source_partition"], event["source_offset"], event["version"]
            ),
            "row": {
                "status": event["status"],
                "start_at": _iso(event["start_at"]),
                "occurred_at": _iso(event["occurred_at"]),
                "updated_at": _iso(event["updated_at"]),
            },
            "reminders": [str(r) for r in event["reminder_ids"]],
            "outbox": _records(found, None),
        }
