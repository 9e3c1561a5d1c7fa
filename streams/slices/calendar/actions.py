"""The console's actions on calendar reminder rows: retry a poison row at once, cancel a
Pending one (an operator's decision: no input makes it Pending again), reopen one an
operator cancelled (statements in db/queries/event_reminders.sql)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

from db import event_reminders
from streams.console.actions import RowAction, state_of
from streams.domain.calendar import MANUAL_CANCEL

LISTING = "calendar/reminders"


def _backing_off(row: Mapping[str, Any]) -> bool:
    return state_of(row) == "Pending" and int(row.get("attempts") or 0) > 0


ACTIONS = (
    RowAction(
        name="retry",
        listing=LISTING,
        noun="reminder",
        allowed="Pending reminders with failed attempts (poison rows)",
        done="retried",
        statement=event_reminders.console_retry,
        parse_target=UUID,
        offered=_backing_off,
        label="retry now",
    ),
    RowAction(
        name="cancel",
        listing=LISTING,
        noun="reminder",
        allowed="Pending",
        done="cancelled",
        statement=event_reminders.console_cancel,
        parse_target=UUID,
        offered=lambda row: state_of(row) == "Pending",
    ),
    RowAction(
        name="reopen",
        listing=LISTING,
        noun="reminder",
        allowed="operator-cancelled",
        done="reopened",
        statement=event_reminders.console_reopen,
        parse_target=UUID,
        offered=lambda row: state_of(row) == "Skipped" and row.get("skip_reason") == MANUAL_CANCEL,
        label="reopen (undo cancel)",
    ),
)
