"""``python -m streams rows list <slice>/<listing> [filters] [--after CURSOR] [--json]`` and
``rows show <slice>/<listing> <id> [--json]``: the console's row pages in a terminal (a
readable table and the next cursor, or the pages' JSON). Exit 2 for a bad filter value or an
unknown listing (the message names it), 1 when the row does not exist or PostgreSQL
cannot be reached."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from db.connector import DatabaseUnavailable
from streams.console import rows
from streams.console.layout import text
from streams.console.listing import FilterError
from streams.runtime import Runtime
from streams.settings import Settings

# CLI option → the query parameter it sets (the web pages' names).
OPTIONS = {
    "state": "state",
    "from_": "from",
    "to": "to",
    "tenant": "tenant",
    "owner": "owner",
    "bu": "bu",
    "key_prefix": "key_prefix",
    "after": "after",
    "limit": "limit",
}


def add_read_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``rows list|show``, in the ``rows`` group of streams/console/cli.py."""
    lst = commands.add_parser(
        "list",
        help="one page of a listing",
        description="One page of a listing (e.g. calendar/reminders, profile/expiry-markers, "
        "profile/expiry-runs, automation/scheduler), oldest first by its natural time "
        "(runs: newest first); times in ISO-8601, UTC unless they carry an offset.",
    )
    lst.add_argument("listing", metavar="SLICE/LISTING")
    lst.add_argument("--state", help="one of the listing's states (default: its first)")
    lst.add_argument("--from", dest="from_", metavar="ISO", help="rows at or after this time")
    lst.add_argument("--to", metavar="ISO", help="rows before this time")
    lst.add_argument("--tenant", metavar="UUID", help="calendar: the event's TenantId")
    lst.add_argument("--owner", metavar="UUID", help="calendar, expiry markers: the owner")
    lst.add_argument("--bu", metavar="UUID", help="automation: the business unit")
    lst.add_argument("--key-prefix", dest="key_prefix", metavar="TEXT", help="automation")
    lst.add_argument("--after", metavar="CURSOR", help="the next cursor a page printed")
    lst.add_argument("--limit", metavar="N", help="rows per page (1-500, default 50)")
    lst.add_argument("--json", action="store_true", help="the page as JSON (as the web's)")
    show = commands.add_parser("show", help="one row: fields, attempts, outbox, lineage")
    show.add_argument("listing", metavar="SLICE/LISTING")
    show.add_argument("id", metavar="ID")
    show.add_argument("--json", action="store_true", help="as JSON (as the web's)")
    lst.set_defaults(run=run_rows)
    show.set_defaults(run=run_rows)


def table(columns: tuple[str, ...], records: list[dict[str, Any]]) -> str:
    cells = [[text(r.get(c)) for c in columns] for r in records]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


async def _run(runtime: Runtime, args: argparse.Namespace) -> int:
    listing = rows.find(args.listing)
    if args.rows_command == "list":
        params = {
            name: getattr(args, option)
            for option, name in OPTIONS.items()
            if getattr(args, option) is not None
        }
        data = await rows.page(runtime, listing, params)
        if args.json:
            print(json.dumps(data, indent=2))
            return 0
        print(table(listing.columns, data["rows"]))
        print(f"{len(data['rows'])} row(s), {listing.name} state {data['query']['state']}")
        print(f"next: --after {data['next']}" if data["next"] else "next: none (last page)")
        return 0
    found = await rows.detail(runtime, listing, args.id)
    if found is None:
        print(f"no row {args.id!r} in {listing.name}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    width = max(len(k) for k in found["row"])
    print(f"{listing.title}: {found['id']}")
    for k, v in found["row"].items():
        print(f"  {k.ljust(width)}  {text(v)}")
    print(f"attempts: {text(found['attempts'])}  last error: {text(found['last_error'])}")
    print("outbox:")
    columns = ("outbox_id", "topic", "delivery", "created_at", "published_at", "offset")
    print(table(columns, found["outbox"]) if found["outbox"] else "  none")
    print("lineage:")
    print(json.dumps(found["lineage"], indent=2))
    return 0


async def _with_runtime(settings: Settings, args: argparse.Namespace) -> int:
    runtime = Runtime(settings)
    try:
        return await _run(runtime, args)
    finally:
        await runtime.close()


def run_rows(settings: Settings, args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_with_runtime(settings, args))
    except (FilterError, rows.UnknownListing) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except DatabaseUnavailable as exc:
        print(f"error: PostgreSQL (setting DATABASE_URL): {exc}", file=sys.stderr)
        return 1
