"""Running a console action: find its declaration among the slices', parse the row's key,
run its audited statement in one transaction, and say what came of it (the web console and
the CLI both come here).

Every action is idempotent by its request id (the web form's hidden ``request_id``, made
when the page was rendered; a script's own; the CLI's ``--request-id``): the transaction
records it on the action's audit row, where it is unique (``ops.console_audit``); the same
id again returns that recorded outcome and changes nothing, and a second delivery racing
the first fails on the unique index, rolls back and returns the first's outcome."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime

from db import console_audit
from db.connector import InputRejected, Pool, transaction
from db.console_audit import ActionOutcome, RecordedRequest
from streams import logs
from streams.console.actions import RowAction, find, index, message

log = logging.getLogger("streams.console")

MAX_REASON_CHARS = 1000
MAX_ACTOR_CHARS = 200
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,100}")
UNIQUE_VIOLATION = "23505"


class BadRequest(ValueError):
    """The action cannot be asked for like this (a key that is no row's, a missing reason)."""


@dataclass(frozen=True)
class Done:
    action: RowAction
    target: str
    result: ActionOutcome
    text: str
    replayed: bool = False
    """The request id was already done: ``result`` is its recorded outcome, nothing changed."""

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
    pool: Pool,
    action: RowAction,
    target: str,
    actor: str,
    reason: str,
    now: datetime,
    *,
    request_id: str,
) -> Done:
    target, actor, reason, request_id = (
        target.strip(),
        actor.strip(),
        reason.strip(),
        request_id.strip(),
    )
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
    if not REQUEST_ID.fullmatch(request_id):
        raise BadRequest(
            "a request_id of 1 to 100 letters, digits, '.', '_', ':' or '-' is required "
            "(the same id again changes nothing)"
        )
    acted = await _act(pool, action, key, actor, reason, now, request_id)
    replayed = isinstance(acted, RecordedRequest)
    if not isinstance(acted, RecordedRequest):
        result = acted
    elif (acted.listing, acted.target) != (action.listing, str(key)) or (
        acted.action not in (action.name, action.label)
    ):
        raise BadRequest(
            f"request id {request_id!r} was already used for {acted.action} on "
            f"{acted.listing} {acted.target}"
        )
    else:
        result = acted.result
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
        replayed=replayed,
    )
    text = message(action, target, result)
    if replayed:
        text += " (this request was already done: its recorded outcome; nothing changed now)"
    return Done(action, target, result, text, replayed=replayed)


async def _act(
    pool: Pool,
    action: RowAction,
    key: object,
    actor: str,
    reason: str,
    now: datetime,
    request_id: str,
) -> RecordedRequest | ActionOutcome:
    """The request done before (its record), or done now (its outcome)."""
    try:
        async with transaction(pool) as conn:
            recorded = await console_audit.of_request(conn, request_id)
            if recorded is not None:
                return recorded
            result = await action.statement(conn, key, actor, reason, now, action.listing)
            await console_audit.claim_request(conn, result.audit_id, request_id)
            return result
    except InputRejected as exc:
        if exc.sqlstate != UNIQUE_VIOLATION:
            raise
        # The same request delivered twice at once: the other transaction recorded it first
        # and this one (its row change included) rolled back.
        async with transaction(pool) as conn:
            recorded = await console_audit.of_request(conn, request_id)
        if recorded is None:
            raise
        return recorded
