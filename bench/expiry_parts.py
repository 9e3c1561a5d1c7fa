"""What the expiry claim costs PostgreSQL against the bare statement, part by part, with the
machine's noise taken out.

The bench's run and its bare statement run minutes apart, and on this shared machine the
same statement's CPU moves by a fifth or more between minutes, so their difference mixes
what the claim does with when it ran. Here four contenders run on four copies of the same
seed, each on its own connection, interleaved in segments of ``SEGMENT`` transactions (each
does its next segment in turn until all owners are done), so a slow minute lands on all of
them. Each one's PostgreSQL CPU is its backends' user + system time from /proc:

- ``bare``: the bench's bare statement (bench/expiry_bare.py), 500 owners at a time in
  OwnerUserId order;
- ``claim, contiguous``: the real claim statement (``document_expiry_reminders_claim``)
  over the same chunks;
- ``claim, the run's order``: the claim over chunks shaped like a run's. A run's scan finds
  owners in the order of their first document by (ExpiresAt, DocumentId), as the seed asks;
  its fan-out sorts them by OwnerUserId a window at a time (``HAND_OUT_FIRST`` doubling up
  to ``HAND_OUT_MOST``, streams/slices/profile/work.py); a worker sorts what it takes at
  once (``RUN_BATCH`` owners, the most a consumer batch holds) and claims 500 of them at a
  time, so a chunk spans about a sixtieth of the key space (measured in a run: a median of
  1.6%; an eighth, 12.5%, before the fan-out sorted);
- ``claim, the run's order, two in flight``: the same on two connections at once, as a
  worker runs them (``TRANSACTIONS_IN_FLIGHT``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from bench.common import url_for
from bench.cpu import own_cpu
from bench.expiry_bare import BARE
from bench.expiry_support import database
from bench.report import Measure, measure
from db.queries import sql
from streams.domain.profile import DEFAULT_THRESHOLDS, scan_window, utc_date
from streams.slices.profile.owners import OWNERS_PER_TRANSACTION, TRANSACTIONS_IN_FLIGHT
from streams.slices.profile.reminders import ITEM_LIMITS, events_out
from streams.slices.profile.work import HAND_OUT_FIRST, HAND_OUT_MOST

SEGMENT = 50
RUN_BATCH = (
    4_000  # owners a worker takes at once: 500 work items of 8 (streams/slices/profile/work.py)
)
NIL = uuid.UUID(int=0)

CONTIGUOUS = "SELECT DISTINCT owner_user_id FROM profile.person_documents ORDER BY 1"
RUN_ORDER = """
SELECT owner_user_id FROM (
    SELECT DISTINCT ON (owner_user_id) owner_user_id, expires_at, document_id
    FROM profile.person_documents ORDER BY owner_user_id, expires_at, document_id) first
ORDER BY expires_at, document_id
"""


@dataclass
class Contender:
    name: str
    chunks: list[list[uuid.UUID]]
    connections: int
    statement: str  # "claim" or "bare"
    cpu: float = 0.0
    wall: float = 0.0


def run_chunks(
    owners: list[uuid.UUID], batch: int, windows: tuple[int, int] = (HAND_OUT_FIRST, HAND_OUT_MOST)
) -> list[list[uuid.UUID]]:
    """``owners`` (in the scan's order) as a worker claims them: sorted a window at a time as
    the fan-out hands them out (``windows``: the first and the most, each twice the last),
    then ``batch`` at a time sorted, then ``OWNERS_PER_TRANSACTION`` at a time."""
    handed: list[uuid.UUID] = []
    start, window = 0, windows[0]
    while start < len(owners):
        handed += sorted(owners[start : start + window])
        start, window = start + window, min(windows[1], 2 * window)
    owners = handed
    chunks: list[list[uuid.UUID]] = []
    size = OWNERS_PER_TRANSACTION
    for i in range(0, len(owners), batch):
        taken = sorted(owners[i : i + batch])
        chunks += [taken[j : j + size] for j in range(0, len(taken), size)]
    return chunks


async def parts(seed: str, as_of: datetime) -> list[Measure]:
    admin = await asyncpg.connect(url_for(seed))
    try:
        contiguous = [r[0] for r in await admin.fetch(CONTIGUOUS)]
        in_run_order = [r[0] for r in await admin.fetch(RUN_ORDER)]
    finally:
        await admin.close()
    size = OWNERS_PER_TRANSACTION
    by_id = [contiguous[i : i + size] for i in range(0, len(contiguous), size)]
    shaped = run_chunks(in_run_order, RUN_BATCH)
    contenders = [
        Contender("bare statement", by_id, 1, "bare"),
        Contender("claim, contiguous owners", by_id, 1, "claim"),
        Contender("claim, the run's order", shaped, 1, "claim"),
        Contender(f"claim, the run's order, {TRANSACTIONS_IN_FLIGHT} in flight", shaped,
                  TRANSACTIONS_IN_FLIGHT, "claim"),
    ]  # fmt: skip
    print(
        f"  the claim against the bare statement, interleaved in segments of {SEGMENT} "
        "transactions on four copies (PostgreSQL CPU of their backends):"
    )
    async with contextlib.AsyncExitStack() as stack:
        urls = [await stack.enter_async_context(database(template=seed)) for _ in contenders]
        steps = [await stepper(url, c, as_of) for url, c in zip(urls, contenders, strict=True)]
        try:
            for start in range(0, max(len(c.chunks) for c in contenders), SEGMENT):
                for step, _ in steps:
                    await step(start)
        finally:
            for _, close in steps:
                await close()
        ended = {await written(url) for url in urls}
    # Each contender did the whole run's work: the same markers and events on every copy.
    assert len(ended) == 1, ended
    bare = contenders[0]
    for c in contenders:
        print(
            f"    {c.name:<36} {c.cpu:6.1f} CPU-s  ({c.cpu / bare.cpu:.2f}x the bare "
            f"statement's)  {c.wall:6.1f} s"
        )
    _, contiguous_claim, ordered, two = contenders
    detail = "PostgreSQL CPU of the backends, interleaved with the bare statement (bench/expiry_parts.py)"
    return [
        measure("expiry: claim statement vs bare, same owners", "CPU-s", contiguous_claim.cpu,
                bare.cpu, higher_is_better=False, bench="expiry", detail=detail),
        measure("expiry: claim statement in the run's order vs bare", "CPU-s", ordered.cpu,
                bare.cpu, higher_is_better=False, bench="expiry", detail=detail),
        measure("expiry: claims two in flight vs one, the run's order", "CPU-s", two.cpu,
                ordered.cpu, higher_is_better=False, bench="expiry", detail=detail),
    ]  # fmt: skip


async def written(url: str) -> tuple[int, int]:
    """Markers and outbox rows of a copy."""
    conn = await asyncpg.connect(url)
    try:
        markers = await conn.fetchval("SELECT count(*) FROM profile.document_expiry_reminders")
        events = await conn.fetchval("SELECT count(*) FROM ops.outbox")
        return int(markers), int(events)
    finally:
        await conn.close()


async def stepper(
    url: str, c: Contender, as_of: datetime
) -> tuple[Callable[[int], Awaitable[None]], Callable[[], Awaitable[None]]]:
    """For contender ``c`` on ``url``: a step doing its chunks ``[start, start + SEGMENT)``
    (adding its backends' CPU and the time to ``c``), and a close."""
    today = utc_date(as_of)
    window = scan_window(today, DEFAULT_THRESHOLDS)
    out = events_out(as_of, "", 1000, {})
    headers = json.dumps({"correlation-id": "bench"})
    conns = [await asyncpg.connect(url) for _ in range(c.connections)]
    pids = [int(await conn.fetchval("SELECT pg_backend_pid()")) for conn in conns]
    if c.statement == "bare":
        # As the bench's bare statement gets it (bench/expiry_bare.py).
        for conn in conns:
            await conn.execute("SET plan_cache_mode = force_custom_plan")
    after = [NIL]

    async def one(conn: asyncpg.Connection, chunk: list[uuid.UUID]) -> None:
        async with conn.transaction():
            if c.statement == "claim":
                args: list[Any] = [chunk, window.lo, window.hi, today, list(DEFAULT_THRESHOLDS),
                        as_of, chunk[0], NIL, 5000, out.topic, out.reminded_at_json, 1000,
                        [headers] * len(chunk), list(ITEM_LIMITS), False]  # fmt: skip
                await conn.fetch(sql("document_expiry_reminders_claim"), *args)
            else:
                row = await conn.fetchrow(BARE, window.lo, window.hi, after[0], len(chunk),
                        today, as_of, list(DEFAULT_THRESHOLDS), "bench")  # fmt: skip
                if row["last"] is not None:
                    after[0] = uuid.UUID(row["last"])

    async def step(start: int) -> None:
        segment = c.chunks[start : start + SEGMENT]
        before = sum(own_cpu(p) for p in pids)
        t = time.perf_counter()

        async def lane(i: int) -> None:
            for chunk in segment[i :: len(conns)]:
                await one(conns[i], chunk)

        await asyncio.gather(*(lane(i) for i in range(len(conns))))
        c.wall += time.perf_counter() - t
        c.cpu += sum(own_cpu(p) for p in pids) - before

    async def close() -> None:
        for conn in conns:
            await conn.close()

    return step, close
