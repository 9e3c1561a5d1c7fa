"""The console's actions on scheduler rows: cancel a Pending or Failed row (an operator's
decision: no input reopens it), reopen a row an operator cancelled, re-send a Completed one
through the support-retry key, and release / retry-key a row on support hold (the CLI's
``automation release|retry-key``, audited); statements in db/queries/scheduler_actions.sql."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from db import scheduler_actions
from db.connector import Connection
from db.console_audit import ActionOutcome
from streams.console.actions import RowAction, state_of
from streams.domain.automation.rules import MANUAL_CANCEL

LISTING = "automation/scheduler"


def _on_hold(row: Mapping[str, Any]) -> bool:
    return bool(row.get("on_hold") or row.get("is_on_support_hold"))


async def _release(
    conn: Connection, target: int, actor: str, reason: str, now: datetime, listing: str
) -> ActionOutcome:
    return await scheduler_actions.release(
        conn, target, actor, reason, now, listing, action="release", reset_attempts=False
    )


async def _retry_key(
    conn: Connection, target: int, actor: str, reason: str, now: datetime, listing: str
) -> ActionOutcome:
    return await scheduler_actions.release(
        conn, target, actor, reason, now, listing, action="retry-key", reset_attempts=True
    )


ACTIONS = (
    RowAction(
        name="cancel",
        listing=LISTING,
        noun="scheduler row",
        allowed="Pending and Failed",
        done="cancelled",
        statement=scheduler_actions.cancel,
        parse_target=int,
        offered=lambda row: state_of(row) in ("Pending", "Failed"),
    ),
    RowAction(
        name="reopen",
        listing=LISTING,
        noun="scheduler row",
        allowed="operator-cancelled",
        done="reopened",
        statement=scheduler_actions.reopen,
        parse_target=int,
        offered=lambda row: (
            state_of(row) == "Cancelled" and row.get("status_reason_code") == MANUAL_CANCEL
        ),
        label="reopen (undo cancel)",
    ),
    RowAction(
        name="resend",
        listing=LISTING,
        noun="scheduler row",
        allowed="Completed",
        done="re-sent",
        statement=scheduler_actions.resend,
        parse_target=int,
        offered=lambda row: state_of(row) == "Completed",
        label="re-send (support retry)",
    ),
    RowAction(
        name="retry",
        listing=LISTING,
        noun="scheduler row",
        allowed="on-hold",
        done="retried from a fresh ladder",
        statement=_retry_key,
        parse_target=int,
        offered=_on_hold,
        label="retry-key",
    ),
    RowAction(
        name="release",
        listing=LISTING,
        noun="scheduler row",
        allowed="on-hold",
        done="released",
        statement=_release,
        parse_target=int,
        offered=_on_hold,
    ),
)
