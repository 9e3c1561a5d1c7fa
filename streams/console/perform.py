"""Running a console action: find its declaration among the slices', parse the row's key,
run its audited statement in one transaction, and say what came of it (the web console and
the CLI both come here)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from db.connector import Pool, transaction
from db.console_audit import ActionOutcome
from streams import logs
from streams.console.actions import RowAction, find, index, message

log = logging.getLogger("streams.console")

MAX_REASON_CHARS = 1000
MAX_ACTOR_CHARS = 200


class BadRequest(ValueError):
    """The action cannot be asked for like this (a key that is no row's, a missing reason)."""


@dataclass(frozen=True)
class Done:
    action: RowAction
    target: str
    result: ActionOutcome
    text: str

    @property
    def ok(self) -> bool:
        """Changed or unchanged (asked again): the row is as asked."""
        return self.result.outcome in ("changed", "unchanged")


def declared_actions() -> dict[tuple[str, str], RowAction]:
    from streams import slices

    return index(a for s in slices.declared() for a in s.actions)


def lookup(listing: str, name: str) -> RowAction:
    """The declared action (UnknownAction, a LookupError, when there is none)."""
    return find(declared_actions(), listing, name)


async def perform(
    pool: Pool, action: RowAction, target: str, actor: str, reason: str, now: datetime
) -> Done:
    target, actor, reason = target.strip(), actor.strip(), reason.strip()
    try:
        key = action.parse_target(target)
    except (TypeError, ValueError):
        raise BadRequest(f"{target!r} is not a {action.noun} id") from None
    if not reason:
        raise BadRequest("a reason is required (it is audited)")
    if len(reason) > MAX_REASON_CHARS:
        raise BadRequest(f"the reason is longer than {MAX_REASON_CHARS} characters")
    if not actor or len(actor) > MAX_ACTOR_CHARS:
        raise BadRequest(f"the actor must be 1 to {MAX_ACTOR_CHARS} characters")
    async with transaction(pool) as conn:
        result = await action.statement(conn, key, actor, reason, now, action.listing)
    # Identifiers only: the actor's name and the reason are in the audit table, not the log.
    logs.event(
        log,
        logging.INFO,
        "console_action",
        listing=action.listing,
        name=action.name,
        target=target,
        outcome=result.outcome,
        audit_id=result.audit_id,
    )
    return Done(action, target, result, message(action, target, result))
