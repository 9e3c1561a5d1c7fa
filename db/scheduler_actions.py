"""Repository of the console's actions on ``automation.scheduler``: one function per
statement in ``db/queries/scheduler_actions.sql`` (each audited in ``ops.console_audit``)."""

from __future__ import annotations

from datetime import datetime

from db.connector import Connection
from db.console_audit import ActionOutcome, outcome_of
from db.queries import sql


async def cancel(
    conn: Connection, scheduler_id: int, actor: str, reason: str, now: datetime, listing: str
) -> ActionOutcome:
    row = await conn.fetchrow(
        sql("scheduler_actions_cancel"), scheduler_id, actor, reason, now, listing
    )
    return outcome_of(row)


async def resend(
    conn: Connection, scheduler_id: int, actor: str, reason: str, now: datetime, listing: str
) -> ActionOutcome:
    row = await conn.fetchrow(
        sql("scheduler_actions_resend"), scheduler_id, actor, reason, now, listing
    )
    return outcome_of(row)


async def reopen(
    conn: Connection, scheduler_id: int, actor: str, reason: str, now: datetime, listing: str
) -> ActionOutcome:
    row = await conn.fetchrow(
        sql("scheduler_actions_reopen"), scheduler_id, actor, reason, now, listing
    )
    return outcome_of(row)


async def release(
    conn: Connection,
    scheduler_id: int,
    actor: str,
    reason: str,
    now: datetime,
    listing: str,
    *,
    action: str,
    reset_attempts: bool,
) -> ActionOutcome:
    """``action`` is ``release`` (attempts kept) or ``retry-key`` (``reset_attempts``)."""
    row = await conn.fetchrow(
        sql("scheduler_actions_release"),
        scheduler_id,
        actor,
        reason,
        now,
        listing,
        reset_attempts,
        action,
    )
    return outcome_of(row)
