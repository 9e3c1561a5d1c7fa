"""Repository of ``ops.console_audit``: one function per statement in
``db/queries/console_audit.sql`` (who did what to which row, from the console or its CLI),
and the outcome every audited action statement returns."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from db.connector import Connection
from db.queries import sql


@dataclass(frozen=True, slots=True)
class ActionOutcome:
    """What one audited action statement did: ``outcome`` is changed, unchanged, refused or
    not_found; the row's state before and after (as text), and its audit row's id."""

    outcome: str
    state_before: str | None
    state_after: str | None
    audit_id: int


def outcome_of(row: Mapping[str, Any]) -> ActionOutcome:
    """The outcome columns every audited action statement returns."""
    return ActionOutcome(
        outcome=str(row["outcome"]),
        state_before=row["state_before"],
        state_after=row["state_after"],
        audit_id=int(row["audit_id"]),
    )


async def record(
    conn: Connection,
    now: datetime,
    actor: str,
    action: str,
    listing: str,
    target: str,
    reason: str,
    outcome: str,
    details: Mapping[str, Any],
) -> int:
    """An action that changes no table row (a DLQ replay): its audit row's id."""
    audit_id = await conn.fetchval(
        sql("console_audit_record"),
        now,
        actor,
        action,
        listing,
        target,
        reason,
        outcome,
        # The pool's jsonb codec encodes it (a json.dumps here stored a JSON string).
        json.loads(json.dumps(dict(details), default=str)),
    )
    return int(audit_id)


async def of_target(
    conn: Connection, listing: str, target: str, limit: int
) -> list[dict[str, Any]]:
    rows = await conn.fetch(sql("console_audit_of_target"), listing, target, limit)
    return [dict(r) for r in rows]


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A console request already done: what it asked for and what came of it."""

    action: str
    listing: str
    target: str
    result: ActionOutcome


async def of_request(conn: Connection, request_id: str) -> RecordedRequest | None:
    row = await conn.fetchrow(sql("console_audit_of_request"), request_id)
    if row is None:
        return None
    return RecordedRequest(
        str(row["action"]),
        str(row["listing"]),
        str(row["target"]),
        ActionOutcome(
            outcome=str(row["outcome"]),
            state_before=row["state_before"],
            state_after=row["state_after"],
            audit_id=int(row["id"]),
        ),
    )


async def claim_request(conn: Connection, audit_id: int, request_id: str) -> None:
    """Record ``request_id`` on the action's audit row (raises asyncpg's
    UniqueViolationError when another transaction recorded it first)."""
    if await conn.fetchval(sql("console_audit_claim_request"), audit_id, request_id) is None:
        raise LookupError(f"no audit row {audit_id} without a request id")
