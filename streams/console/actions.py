"""What a console action is: a small pure declaration each slice makes of the actions its
rows allow (streams/slices/<slice>/actions.py), and the message an operator reads of what
came of one.

An action runs one audited statement (db/): it changes the row only when its state allows
it, writes who, when and why into ``ops.console_audit`` in the same statement, and asked
again changes nothing (``unchanged``). Both the web console (POST /console/actions/<name>)
and the CLI (``streams rows retry|cancel|reopen|resend|release|retry-key``) run it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from db.connector import Connection
from db.console_audit import ActionOutcome

Statement = Callable[[Connection, Any, str, str, datetime, str], Awaitable[ActionOutcome]]
"""(conn, target id, actor, reason, now, listing) → what the action's statement did."""


@dataclass(frozen=True)
class RowAction:
    """One action on the rows of one listing (e.g. ``cancel`` on ``calendar/reminders``)."""

    name: str
    """The action's name: the URL segment of /console/actions/<name> and the CLI command."""
    listing: str
    """The listing whose rows it acts on, e.g. ``calendar/reminders``."""
    noun: str
    """What a row is called in messages: ``reminder``, ``scheduler row``."""
    allowed: str
    """The states it applies to, as the refusal says: "only <allowed> <noun>s can be ..."."""
    done: str
    """The past participle in messages: ``cancelled``, ``retried``."""
    statement: Statement
    parse_target: Callable[[str], Any]
    """The row's key from its text (raises ValueError for text that cannot be one)."""
    offered: Callable[[Mapping[str, Any]], bool]
    """Whether a row (as the listing shows it) gets this action's button."""
    label: str = ""
    """The button's text (default: the name)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.listing, self.name)


class UnknownAction(LookupError):
    """No such action on that listing; the message lists the ones there are."""


def index(actions: Iterable[RowAction]) -> dict[tuple[str, str], RowAction]:
    found: dict[tuple[str, str], RowAction] = {}
    for action in actions:
        if action.key in found:
            raise ValueError(f"action {action.name!r} declared twice on {action.listing}")
        found[action.key] = action
    return found


def find(actions: Mapping[tuple[str, str], RowAction], listing: str, name: str) -> RowAction:
    try:
        return actions[(listing, name)]
    except KeyError:
        here = sorted(n for lst, n in actions if lst == listing)
        if here:
            raise UnknownAction(
                f"no action {name!r} on {listing} (there: {', '.join(here)})"
            ) from None
        listings = sorted({lst for lst, _ in actions})
        raise UnknownAction(
            f"no actions on {listing!r} (listings with actions: {', '.join(listings)})"
        ) from None


def message(action: RowAction, target: str, result: ActionOutcome) -> str:
    """What came of it, in one line, for the CLI and the page."""
    noun, before, after = action.noun, result.state_before, result.state_after
    if result.outcome == "changed":
        return f"{noun} {target} {action.done}: {before} -> {after} (audit {result.audit_id})"
    if result.outcome == "unchanged":
        return f"{noun} {target} is {before}: nothing to do (already so), nothing changed"
    if result.outcome == "not_found":
        return f"no {noun} {target}"
    return f"{noun} {target} is {before}: only {action.allowed} {noun}s can be {action.done}"


def state_of(row: Mapping[str, Any]) -> str:
    """A row's state as listings name it (``status`` or ``status_id``)."""
    return str(row.get("status") or row.get("status_id") or "")
