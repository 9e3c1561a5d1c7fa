"""``python -m bench [dispatch|lateness|claim|ingest|automation|expiry ...]`` (default: all), figures printed."""

from __future__ import annotations

import asyncio
import sys

from bench import automation, claim, dispatch, expiry, ingest, lateness

BENCHES = {
    "dispatch": dispatch.run,
    "lateness": lateness.run,
    "claim": claim.run,
    "ingest": ingest.run,
    "automation": automation.run,
    "expiry": expiry.run,
}


async def main(names: list[str]) -> int:
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"unknown bench {unknown}; choose from {list(BENCHES)}", file=sys.stderr)
        return 2
    for name in names or list(BENCHES):
        await BENCHES[name]()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
