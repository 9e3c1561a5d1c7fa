"""``explain ID``: ask every declared slice what it knows about an id (its ``explain``, an
``async def explain(runtime, ident) -> dict | None``)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from streams import slices
from streams.runtime import Runtime
from streams.settings import Settings


async def explain(runtime: Runtime, ident: str) -> dict[str, Any] | None:
    for s in slices.declared():
        if s.explain is not None:
            found = await s.explain(runtime, ident)
            if found is not None:
                return found
    return None


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``explain ID``."""
    p = sub.add_parser(
        "explain",
        help="what happened to a ReminderId or EventId: input message, row, outbox, topic offset",
        description="What happened to a ReminderId or EventId (input message, row, outbox, "
        "topic offset) as JSON, asking every installed slice; exit 1 when nothing is known.",
    )
    p.add_argument("id", metavar="ID", help="a ReminderId or EventId")
    p.set_defaults(run=run_explain)


def run_explain(settings: Settings, args: argparse.Namespace) -> int:
    return asyncio.run(_explain_cli(Runtime(settings), args.id))


async def _explain_cli(runtime: Runtime, ident: str) -> int:
    try:
        found = await explain(runtime, ident)
    finally:
        await runtime.close()
    if found is None:
        print(f"nothing known about {ident!r} (or it is older than the outbox retention)")
        return 1
    print(json.dumps(found, indent=2, default=str))
    return 0
