"""``python -m streams outbox parked|retry ID|drop ID``: the rows the relay parked.

parked [--limit N] [--format json]  rows Kafka refused for good, oldest first (no payloads)
retry ID [--reason R] [--actor A]   back to ops.outbox with the same id (and outbox-id
                                    header); the relay sends it next, after the cause is fixed
drop ID [--reason R] [--actor A]    delete a parked row for good (its event is never sent)

retry and drop are audited in ops.console_audit (listing ``outbox``, target the row's id,
actor ``--actor`` or ``$USER``), in the transaction that moves or deletes the row.

Exit status: 0 done, 1 no such parked row, 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from datetime import UTC, datetime

import db.outbox as repo
from db import console_audit
from db.connector import connection, create_pool, transaction
from streams import logs
from streams.settings import Settings
from streams.timers.control import actor_default

log = logging.getLogger("streams.outbox")


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``outbox parked [--limit N] [--format json] | retry ID | drop ID``."""
    outbox = sub.add_parser(
        "outbox",
        help="rows the relay parked (Kafka refused them for good): list, send again, delete",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = outbox.add_subparsers(dest="command", metavar="<command>", required=True)
    parked = commands.add_parser("parked", help="list parked rows")
    parked.add_argument("--limit", type=int, default=100, metavar="N")
    parked.add_argument("--format", choices=("text", "json"), default="text")
    for name in ("retry", "drop"):
        cmd = commands.add_parser(name, help=f"{name} one parked row")
        cmd.add_argument("id", type=int, metavar="ID", help="a parked row's id (from parked)")
        cmd.add_argument("--reason", default="", help="why (audited)")
        cmd.add_argument("--actor", default=None, help="who (default: $USER)")
    outbox.set_defaults(run=run_outbox)


def _row(r: repo.ParkedRow) -> dict[str, object]:
    return {
        "id": r.id,
        "topic": r.topic,
        "key": r.key,
        "payload_bytes": r.payload_bytes,
        "created_at": r.created_at.isoformat(),
        "parked_at": r.parked_at.isoformat(),
        "reason": r.reason,
        "error": r.error,
        "refusals": r.refusals,
    }


async def _run(settings: Settings, args: argparse.Namespace) -> int:
    pool = await create_pool(settings.database_url, min_size=1, max_size=1)
    try:
        if args.command == "parked":
            async with connection(pool) as conn:
                rows = await repo.parked_list(conn, args.limit)
            if args.format == "json":
                print(json.dumps([_row(r) for r in rows], indent=2))
            else:
                print(f"{len(rows)} parked row(s)")
                for r in rows:
                    print(
                        f"{r.id}\t{r.reason}\t{r.error}\ttopic={r.topic}\tkey={r.key}\t"
                        f"bytes={r.payload_bytes}\tparked_at={r.parked_at.isoformat()}"
                    )
            return 0
        async with transaction(pool) as conn:
            if args.command == "retry":
                found = await repo.parked_retry(conn, args.id)
                details: dict[str, object] = {}
            else:
                dropped = await repo.parked_drop(conn, args.id)
                found = dropped is not None
                details = {"topic": dropped[0], "parked_reason": dropped[1]} if dropped else {}
            # Audited like every console action, in the same transaction as the change.
            await console_audit.record(
                conn,
                datetime.now(UTC),
                args.actor or actor_default(),
                f"outbox-{args.command}",
                "outbox",
                str(args.id),
                args.reason,
                "changed" if found else "not_found",
                details,
            )
        if not found:
            print(f"no parked outbox row {args.id}", file=sys.stderr)
            return 1
        logs.event(log, logging.WARNING, "outbox_parked_" + args.command, outbox_id=args.id)
        verb = "back in the outbox (sent next)" if args.command == "retry" else "dropped"
        print(f"outbox row {args.id} {verb}")
        return 0
    finally:
        await pool.close()


def run_outbox(settings: Settings, args: argparse.Namespace) -> int:
    return asyncio.run(_run(settings, args))
