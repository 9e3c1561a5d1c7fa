"""``explain ID``: ask every installed slice what it knows about an id (a slice package may
define ``async def explain(runtime, ident) -> dict | None``)."""

from __future__ import annotations

from typing import Any

from streams.runtime import Runtime
from streams.slices import load


async def explain(runtime: Runtime, ident: str) -> dict[str, Any] | None:
    for module in load():
        resolver = getattr(module, "explain", None)
        if resolver is not None:
            found: dict[str, Any] | None = await resolver(runtime, ident)
            if found is not None:
                return found
    return None


async def run_cli(runtime: Runtime, argv: list[str]) -> int:
    import json
    import sys

    if len(argv) != 1 or argv[0].startswith("-"):
        await runtime.close()
        print("usage: python -m streams explain ID", file=sys.stderr)
        return 0 if argv in (["-h"], ["--help"]) else 2
    try:
        found = await explain(runtime, argv[0])
    finally:
        await runtime.close()
    if found is None:
        print(f"nothing known about {argv[0]!r} (or it is older than the outbox retention)")
        return 1
    print(json.dumps(found, indent=2, default=str))
    return 0
