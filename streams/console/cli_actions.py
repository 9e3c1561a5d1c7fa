"""``streams rows retry|cancel|reopen|resend|release|retry-key LISTING ID --reason .. [--actor ..]``:
a console action from the command line, audited as the web's are, printing what changed.

The CLI is trusted (it has the database credentials): the actor is ``--actor`` or ``$USER``.
Every action is idempotent by its request id (``--request-id``). The default is derived from
the command (listing, action, id, actor and reason): running the same command again — a
retry after a timeout or a lost answer — is the same request and changes nothing, it prints
the recorded outcome. A deliberate second action on the same row needs another reason (it is
a new decision, audited as such) or its own ``--request-id``.
Exit codes: 0 the row is as asked (changed, or already so); 1 refused by the row's state or
no such row; 2 a usage problem (unknown listing or action, an id that is no row's).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys

from streams.settings import Settings

# Action names offered on the command line (each listing declares which of them it has).
VERBS = {
    "retry": "retry a poison or failed row now",
    "cancel": "cancel a Pending reminder or a Pending/Failed scheduler row",
    "reopen": "reopen a reminder or scheduler row an operator cancelled (undo its cancel)",
    "resend": "re-send a Completed scheduler row through the support-retry key",
    "release": "put a scheduler row on support hold back, its attempts kept",
    "retry-key": "retry a held scheduler row's key from a fresh ladder",
}
# ``retry-key`` is the scheduler listing's ``retry`` action under its support name.
ALIASES = {"retry-key": "retry"}


def add_action_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for verb, what in VERBS.items():
        p = commands.add_parser(
            verb,
            help=what,
            description=f"{what}. {__doc__}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument(
            "listing", metavar="LISTING", help="e.g. calendar/reminders, automation/scheduler"
        )
        p.add_argument("id", metavar="ID", help="the row's key (ReminderId, scheduler id)")
        p.add_argument("--reason", required=True, help="why (audited)")
        p.add_argument("--actor", default=None, help="who (default: $USER)")
        p.add_argument(
            "--request-id",
            default=None,
            help="the request's id: the same id again changes nothing (default: derived "
            "from the listing, action, id, actor and reason)",
        )
        p.set_defaults(run=run_action, verb=verb)


def default_request_id(listing: str, action: str, target: str, actor: str, reason: str) -> str:
    """The same command, the same request: a digest of what it asks (stripped as perform
    strips them)."""
    parts = (listing, action, target, actor, reason)
    digest = hashlib.sha256("\n".join(p.strip() for p in parts).encode()).hexdigest()
    return f"cli-{digest[:40]}"


def run_action(settings: Settings, args: argparse.Namespace) -> int:
    from db.connector import create_pool
    from streams.console.actions import UnknownAction
    from streams.console.perform import BadRequest, lookup, perform
    from streams.timers.control import actor_default

    try:
        action = lookup(args.listing, ALIASES.get(args.verb, args.verb))
    except UnknownAction as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    async def go() -> int:
        from datetime import UTC, datetime

        actor = args.actor or actor_default()
        request_id = args.request_id or default_request_id(
            args.listing, action.name, args.id, actor, args.reason
        )
        pool = await create_pool(settings.database_url, min_size=1, max_size=1)
        try:
            done = await perform(
                pool, action, args.id, actor, args.reason, datetime.now(UTC), request_id=request_id
            )
        except BadRequest as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        finally:
            await pool.close()
        print(done.text, file=sys.stdout if done.ok else sys.stderr)
        return 0 if done.ok else 1

    return asyncio.run(go())
