"""Small asyncio helpers shared by the background services (relay, listener, registry)."""

from __future__ import annotations

import asyncio


async def wait_any(*events: asyncio.Event, within: float | None) -> None:
    """Return when any event is set or after ``within`` seconds."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


def describe(exc: BaseException) -> str:
    """Type and message of an error, one line: safe to log (driver messages name objects,
    never the row values we deliberately keep out of logs)."""
    text = str(exc).replace("\n", " ")[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
