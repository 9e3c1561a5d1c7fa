"""Repository for ops.outbox: one function per named statement in db/queries/outbox.sql."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

from db.connector import Connection, Pool
from db.queries import sql

CHANNEL = "ops_outbox"
# First key of the two-int advisory locks that own a lane ("outb" in ASCII). Every relay
# must use the same value; the second key is the lane number.
LANE_LOCK_SPACE = 0x6F757462
LANES = 64

NotifyCallback = Callable[[Connection, int, str, str], None]


@dataclass(frozen=True, slots=True)
class PendingRow:
    id: int
    lane: int
    topic: str
    key: str
    payload: str
    headers: dict[str, str]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Backlog:
    count: int
    oldest_created_at: datetime | None


def _headers(text: str) -> dict[str, str]:
    # Stored as jsonb; anything that is not a string is sent as its JSON text.
    raw = json.loads(text)
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}


# Outbox rows given column-wise: topics, keys, payloads (JSON text), headers (JSON text).
OutboxColumns = tuple[Sequence[str], Sequence[str], Sequence[str], Sequence[str]]
# One record as the insert statements take it: topic, key, payload JSON, headers JSON.
OutboxRow = tuple[str, str, str, str]


async def insert_many(
    conn: Connection,
    topics: Sequence[str],
    keys: Sequence[str],
    payloads: Sequence[str],
    headers_json: Sequence[str],
) -> list[int]:
    """Insert rows given column-wise; returns their ids in input order."""
    rows = await conn.fetch(
        sql("outbox_insert_many"), list(topics), list(keys), list(payloads), list(headers_json)
    )
    return sorted(int(r["id"]) for r in rows)


@asynccontextmanager
async def lane_transaction(pool: Pool) -> AsyncIterator[Connection]:
    """A READ COMMITTED transaction: each statement sees commits made before it started,
    which the lane protocol relies on (lock first, then read the lane)."""
    async with pool.acquire() as conn, conn.transaction(isolation="read_committed"):
        yield conn


async def lanes_lock(conn: Connection, *, exclude: Sequence[int], limit: int) -> list[int]:
    rows = await conn.fetch(sql("outbox_lanes_lock"), LANE_LOCK_SPACE, list(exclude), limit)
    return sorted(int(r["lane"]) for r in rows)


async def pending_get(
    conn: Connection,
    lanes: Sequence[int],
    per_lane: int,
    *,
    probe: Collection[int] = (),
) -> list[PendingRow]:
    """Up to ``per_lane`` oldest unpublished rows of each lane, in id order; lanes in
    ``probe`` give only their head row."""
    limits = [1 if lane in probe else per_lane for lane in lanes]
    rows = await conn.fetch(sql("outbox_pending_get"), list(lanes), limits)
    return [
        PendingRow(
            id=int(r["id"]),
            lane=int(r["lane"]),
            topic=str(r["topic"]),
            key=str(r["key"]),
            payload=str(r["payload"]),
            headers=_headers(r["headers"]),
            created_at=r["created_at"],
        )
        for r in rows
    ]


async def published_mark(
    conn: Connection,
    acked: Sequence[tuple[int, int | None, int | None]],
    published_at: datetime,
) -> int:
    """Mark (id, Kafka partition, Kafka offset) rows published; returns how many."""
    return int(
        await conn.fetchval(
            sql("outbox_published_mark"),
            [a[0] for a in acked],
            published_at,
            [a[1] for a in acked],
            [a[2] for a in acked],
        )
    )


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: int
    topic: str
    headers: dict[str, str]
    created_at: datetime
    published_at: datetime | None
    published_partition: int | None
    published_offset: int | None
    payload: str
    parked_reason: str | None = None
    """Set for a row the relay parked (ops.outbox_parked): why."""


async def records_of_key(conn: Connection, key: str, limit: int) -> list[KeyRecord]:
    rows = await conn.fetch(sql("outbox_records_of_key"), key, limit)
    return [
        KeyRecord(
            int(r["id"]),
            str(r["topic"]),
            _headers(r["headers"]),
            r["created_at"],
            r["published_at"],
            r["published_partition"],
            r["published_offset"],
            str(r["payload"]),
            r["parked_reason"],
        )
        for r in rows
    ]


async def backlog_get(conn: Connection) -> Backlog:
    row = await conn.fetchrow(sql("outbox_backlog_get"))
    return Backlog(count=int(row["backlog"]), oldest_created_at=row["oldest_created_at"])


async def published_delete(conn: Connection, cutoff: datetime, limit: int) -> int:
    return int(await conn.fetchval(sql("outbox_published_delete"), cutoff, limit))


async def listen(conn: Connection, callback: NotifyCallback) -> None:
    await conn.add_listener(CHANNEL, callback)


async def listener_ping(conn: Connection) -> None:
    await conn.fetchval(sql("outbox_listener_ping"))


async def pass_keepalive(conn: Connection) -> None:
    await conn.fetchval(sql("outbox_pass_keepalive"))


@dataclass(frozen=True, slots=True)
class ParkRequest:
    id: int
    reason: str
    error: str
    refusals: int


@dataclass(frozen=True, slots=True)
class ParkedRow:
    id: int
    topic: str
    key: str
    payload_bytes: int
    created_at: datetime
    parked_at: datetime
    reason: str
    error: str
    refusals: int


@dataclass(frozen=True, slots=True)
class ParkedStats:
    reason: str
    parked: int
    oldest_parked_at: datetime


async def parked_move(
    conn: Connection, requests: Sequence[ParkRequest], parked_at: datetime
) -> int:
    """Move unpublished rows to ops.outbox_parked (on the relay's lane transaction)."""
    return int(
        await conn.fetchval(
            sql("outbox_parked_move"),
            [r.id for r in requests],
            [r.reason for r in requests],
            [r.error for r in requests],
            [r.refusals for r in requests],
            parked_at,
        )
    )


async def parked_list(conn: Connection, limit: int) -> list[ParkedRow]:
    rows = await conn.fetch(sql("outbox_parked_list"), limit)
    return [
        ParkedRow(
            id=int(r["id"]),
            topic=str(r["topic"]),
            key=str(r["key"]),
            payload_bytes=int(r["payload_bytes"]),
            created_at=r["created_at"],
            parked_at=r["parked_at"],
            reason=str(r["reason"]),
            error=str(r["error"]),
            refusals=int(r["refusals"]),
        )
        for r in rows
    ]


async def parked_stats(conn: Connection) -> list[ParkedStats]:
    rows = await conn.fetch(sql("outbox_parked_stats"))
    return [ParkedStats(str(r["reason"]), int(r["parked"]), r["oldest_parked_at"]) for r in rows]


async def parked_retry(conn: Connection, outbox_id: int) -> bool:
    """Move a parked row back into ops.outbox; False if there is no such parked row."""
    return bool(await conn.fetchval(sql("outbox_parked_retry"), outbox_id))


async def parked_drop(conn: Connection, outbox_id: int) -> tuple[str, str] | None:
    """Delete a parked row; its (topic, reason), or None if there is no such parked row."""
    row = await conn.fetchrow(sql("outbox_parked_drop"), outbox_id)
    return None if row is None else (str(row["topic"]), str(row["reason"]))


@dataclass(frozen=True, slots=True)
class MinuteStats:
    """One topic's minute of ``outbox_minutes``."""

    topic: str
    minute: datetime
    written: int
    published: int
    wait_p95_seconds: float | None
    wait_max_seconds: float | None


async def minutes(
    conn: Connection, since: datetime, until: datetime, topics: Sequence[str], limit: int
) -> list[MinuteStats]:
    """Written and published records per topic and minute of [since, until), with their
    wait; at most ``limit`` published and ``limit`` waiting rows read."""
    rows = await conn.fetch(sql("outbox_minutes"), since, until, list(topics), limit)
    return [
        MinuteStats(
            topic=r["topic"],
            minute=r["minute"],
            written=r["written"],
            published=r["published"],
            wait_p95_seconds=r["wait_p95_seconds"],
            wait_max_seconds=r["wait_max_seconds"],
        )
        for r in rows
    ]
