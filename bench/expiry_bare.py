"""The expiry bench's two references.

- ``bare``: the database work of a run as one bare SQL statement per 500 owners (``BARE``).
- ``bare_and_publish``: the same statement with a bare publisher beside it (bench/relay.py's
  loop: lock, read the next rows by id, send, wait for the acks, mark), sending the events
  the statement writes to Kafka while it runs.

A run must publish its events; the bare statement alone does not. The second reference pays
for publishing as little as anything can, on the same cores at the same time as the
statement, so the run against it is what the project's code adds over work no implementation
avoids. It is timed like the run: until the last statement commits (a run ends when its
owners are committed, its relay still publishing); how long the publisher took in all is
printed beside it.

The publisher follows the outbox by id (``id > last``). That is safe here only because one
connection writes, one statement at a time, so ids become visible in order; the relay cannot
assume it (streams/outbox/relay_pass.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from bench.common import KAFKA_BOOTSTRAP, drop_topics
from bench.relay import bare_pass, bare_producer
from streams.contracts import DOCUMENT_EXPIRY_REMINDERS
from streams.domain.profile import DEFAULT_THRESHOLDS, scan_window, utc_date
from streams.kafka_admin import ensure_topics
from streams.settings import Settings

# The reference: for a batch of owners (keyset on OwnerUserId), their documents in the
# window, every crossed threshold inserted insert-wins, t* = the smallest won, and one outbox
# row per owner with a won t* - the same rows the real path writes, in one statement. Its
# marker ids are time-ordered, as the claim's are (ops.uuid_v7, migration 0030): with random
# ones the same statement takes about a fifth longer.
BARE = """
WITH o AS (
    SELECT DISTINCT owner_user_id FROM profile.person_documents
    WHERE expires_at IS NOT NULL AND expires_at BETWEEN $1 AND $2
      AND status = 'Active' AND NOT is_deleted AND owner_user_id > $3
    ORDER BY owner_user_id LIMIT $4
), d AS (
    SELECT p.document_id, p.owner_user_id, p.type, p.number_mask, p.expires_at,
           p.expires_at - $5::date AS days_left
    FROM profile.person_documents p JOIN o USING (owner_user_id)
    WHERE p.expires_at IS NOT NULL AND p.expires_at BETWEEN $1 AND $2
      AND p.status = 'Active' AND NOT p.is_deleted
), ins AS (
    INSERT INTO profile.document_expiry_reminders
        (id, document_id, owner_user_id, type, threshold_days, expires_at, reminded_at)
    SELECT ops.uuid_v7(), d.document_id, d.owner_user_id, d.type, t, d.expires_at, $6
    FROM d CROSS JOIN unnest($7::int[]) AS t WHERE d.days_left <= t
    ORDER BY d.document_id, t
    ON CONFLICT (document_id, threshold_days) DO NOTHING
    RETURNING document_id, owner_user_id, threshold_days
), star AS (
    SELECT document_id, owner_user_id, min(threshold_days) AS t FROM ins GROUP BY 1, 2
), ob AS (
    INSERT INTO ops.outbox (topic, key, payload, headers)
    SELECT 'pin.profile.document-expiry-reminders.v1', s.owner_user_id::text,
           json_build_object('ContractVersion', 1, 'OwnerUserId', s.owner_user_id,
               'RemindedAt', $6::timestamptz,
               'Documents', json_agg(json_build_object('DocumentId', d.document_id,
                   'Type', d.type, 'NumberMask', d.number_mask, 'ExpiresAt', d.expires_at,
                   'ThresholdDays', s.t, 'DaysLeft', d.days_left) ORDER BY d.document_id)),
           jsonb_build_object('correlation-id', $8::text)
    FROM star s JOIN d USING (document_id)
    GROUP BY s.owner_user_id
    RETURNING 1
)
SELECT (SELECT max(owner_user_id::text) FROM o) AS last, (SELECT count(*) FROM o) AS owners,
       (SELECT count(*) FROM ob) AS events
"""


async def bare(
    url: str, as_of: datetime, batch: int = 500, wrote: asyncio.Event | None = None
) -> tuple[int, int, float]:
    """The bare statement, 500 owners at a time, to the end of the window: (owners, events,
    seconds). ``wrote`` is set after each statement commits (a publisher beside it waits on
    it)."""
    today = utc_date(as_of)
    window = scan_window(today, DEFAULT_THRESHOLDS)
    conn = await asyncpg.connect(url)
    try:
        # Planned for its parameters every time: a generic plan (from a prepared statement's
        # sixth execution on) guesses a few hundred documents in the window and reads all
        # of them from the covering ExpiresAt index to find 500 owners (120 ms a batch
        # instead of 55 on 250,000 documents). The reference gets its best plan.
        await conn.execute("SET plan_cache_mode = force_custom_plan")
        owners = events = 0
        after = uuid.UUID(int=0)
        run = uuid.uuid4().hex[:12]
        t = time.perf_counter()
        while True:
            row = await conn.fetchrow(
                BARE, window.lo, window.hi, after, batch, today, as_of,
                list(DEFAULT_THRESHOLDS), run,
            )  # fmt: skip
            owners += row["owners"]
            events += row["events"]
            if wrote is not None:
                wrote.set()
            if row["owners"] < batch:
                break
            after = uuid.UUID(row["last"])
        return owners, events, time.perf_counter() - t
    finally:
        await conn.close()


@dataclass
class Published:
    """What the publisher beside the statement did: rows, and seconds from the start."""

    rows: int = 0
    seconds: float = 0.0


async def follow(
    publish_pass: Callable[[], Awaitable[int]], wrote: asyncio.Event, finished: asyncio.Event
) -> int:
    """Run ``publish_pass`` (it publishes the next rows, returns how many) as the writer
    commits (``wrote``) until the writer is ``finished`` and a pass begun after that finds
    nothing; returns the rows published."""
    rows = 0
    while True:
        # Read before the pass: once the writer had finished, the pass sees every row.
        done = finished.is_set()
        wrote.clear()
        n = await publish_pass()
        rows += n
        if n:
            continue
        if done:
            return rows
        await wrote.wait()


async def publish_following(
    url: str, wrote: asyncio.Event, finished: asyncio.Event, prefix: str, out: Published
) -> None:
    """Publish the outbox's rows as the statement commits them (``follow``)."""
    conn = await asyncpg.connect(url)
    producer = bare_producer()
    await producer.start()
    t = time.perf_counter()
    last = 0

    async def publish_pass() -> int:
        nonlocal last
        n, last = await bare_pass(conn, producer, last, prefix)
        return n

    try:
        out.rows = await follow(publish_pass, wrote, finished)
        out.seconds = time.perf_counter() - t
    finally:
        await producer.stop()
        await conn.close()


async def bare_and_publish(url: str, as_of: datetime) -> tuple[int, float, Published]:
    """The bare statement with the publisher beside it: (events written, the statement's
    seconds, what the publisher did)."""
    prefix = f"bxp{uuid.uuid4().hex[:8]}."
    settings = Settings(kafka_bootstrap=KAFKA_BOOTSTRAP, topic_prefix=prefix)
    await ensure_topics(settings, [settings.topic(DOCUMENT_EXPIRY_REMINDERS.name)])
    wrote, finished, published = asyncio.Event(), asyncio.Event(), Published()
    try:
        publisher = asyncio.create_task(publish_following(url, wrote, finished, prefix, published))
        try:
            _, events, seconds = await bare(url, as_of, wrote=wrote)
        finally:
            finished.set()
            wrote.set()
        await publisher
    finally:
        await drop_topics(prefix)
    assert published.rows == events, (published.rows, events)
    return events, seconds, published
