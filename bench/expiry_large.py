"""Document expiry with one huge owner: 1,000,000 documents of one owner beside 1,000 ordinary
owners (5 documents each) in one run by a real worker process (Kafka fan-out, chunked claims,
continuations): time, peak RSS, events, documents reminded (each once), the largest event,
and how long the ordinary owners waited - all of them, and those on the huge owner's
partition."""

from __future__ import annotations

import os
import resource
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg

from bench.common import scratch_dir
from bench.expiry import counts, manual_run, worker_settings
from bench.expiry_support import (
    KAFKA_BOOTSTRAP,
    database,
    peak_rss_mb,
    wait_ready,
    worker,
)
from bench.report import Measure, Target, measure
from streams.kafka_admin import ensure_topics
from streams.settings import Settings
from streams.slices.profile.work import partition_of

# The run's budget for this bench (the schedule's 10 minutes is for a daily run on a server,
# not for 1,000,000 documents on a shared laptop).
MAX_DURATION_SECONDS = "1800"

SEED = """
INSERT INTO profile.person_documents (document_id, owner_user_id, person_id, type,
    number_mask, expires_at, status, is_deleted, version, occurred_at)
SELECT gen_random_uuid(), o, gen_random_uuid(), 'InternationalPassport', '45** ****12',
       $3::date - 1 + ((random() * 31)::int), 'Active', false, 1, now()
FROM unnest($1::uuid[]) AS o CROSS JOIN generate_series(1, $2::int)
"""

# Per owner: its events, documents listed, distinct documents, first and last event time.
EVENTS = """
SELECT key, count(*) AS events, sum(json_array_length(payload->'Documents')) AS listed,
       max(octet_length(payload::text)) AS largest, min(created_at) AS first,
       max(created_at) AS last
FROM ops.outbox WHERE topic LIKE '%document-expiry-reminders.v1' GROUP BY key
"""

DISTINCT = """
SELECT count(DISTINCT d->>'DocumentId') FROM ops.outbox o,
       json_array_elements(o.payload->'Documents') AS d
WHERE o.topic LIKE '%document-expiry-reminders.v1'
"""


async def seed(url: str, big: uuid.UUID, ordinary: list[uuid.UUID], size: int, today: Any) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(SEED, [big], size, today)
        await conn.execute(SEED, ordinary, 5, today)
        await conn.execute("VACUUM ANALYZE profile.person_documents")
    finally:
        await conn.close()


async def run(big_documents: int = 1_000_000, owners: int = 1_000) -> list[Measure]:
    documents = big_documents + owners * 5
    print(
        f"\n== document expiry, one huge owner: {big_documents:,} documents beside {owners:,} "
        f"owners of 5 =="
    )
    as_of = datetime.now(UTC)
    big = uuid.uuid4()
    ordinary = [uuid.uuid4() for _ in range(owners)]
    previous = os.environ.get("TIMER_DOCUMENT_EXPIRY_MAX_DURATION_SECONDS")
    os.environ["TIMER_DOCUMENT_EXPIRY_MAX_DURATION_SECONDS"] = MAX_DURATION_SECONDS
    try:
        with scratch_dir("bench-expiry-large-") as tmp:
            async with database(prefix="bench_exl") as url:
                t = time.perf_counter()
                await seed(url, big, ordinary, big_documents, as_of.date())
                print(f"  seeded {documents:,} documents in {time.perf_counter() - t:.1f} s")
                prefix = f"bl{uuid.uuid4().hex[:8]}."
                env = worker_settings(url, prefix, tmp / "worker")
                env["TIMER_DOCUMENT_EXPIRY_MAX_DURATION_SECONDS"] = MAX_DURATION_SECONDS
                settings = Settings(kafka_bootstrap=KAFKA_BOOTSTRAP, topic_prefix=prefix)
                await ensure_topics(settings)
                with worker(env, tmp, "worker") as proc:
                    await wait_ready(proc)
                    pid, *children = proc.pids
                    conn = await asyncpg.connect(url)
                    try:
                        started_at = await conn.fetchval("SELECT clock_timestamp()")
                        t = time.perf_counter()
                        record, _ = await manual_run(env, as_of, rerun=False)
                        wall = time.perf_counter() - t
                        rss = peak_rss_mb(pid)
                        timer_rss = max((peak_rss_mb(c) for c in children), default=0.0)
                        rows = await conn.fetch(EVENTS)
                        distinct = int(await conn.fetchval(DISTINCT))
                    finally:
                        await conn.close()
    finally:
        if previous is None:
            os.environ.pop("TIMER_DOCUMENT_EXPIRY_MAX_DURATION_SECONDS", None)
        else:
            os.environ["TIMER_DOCUMENT_EXPIRY_MAX_DURATION_SECONDS"] = previous
    c = counts(record)
    run_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    by_owner = {r["key"]: r for r in rows}
    huge = by_owner[str(big)]
    events = sum(int(r["events"]) for r in rows)
    listed = sum(int(r["listed"]) for r in rows)
    largest = max(int(r["largest"]) for r in rows)
    partitions = settings.topic_partitions
    shared = [o for o in ordinary if partition_of(o, partitions) == partition_of(big, partitions)]

    def waited(group: list[uuid.UUID]) -> tuple[float, float]:
        """Median and longest time from the run's start to an owner's last event."""
        times = sorted((by_owner[str(o)]["last"] - started_at).total_seconds() for o in group)
        return (times[len(times) // 2], times[-1]) if times else (0.0, 0.0)

    med_all, max_all = waited(ordinary)
    med_shared, max_shared = waited(shared)
    huge_first = (huge["first"] - started_at).total_seconds()
    huge_last = (huge["last"] - started_at).total_seconds()
    print(
        f"  one run, one worker (Kafka fan-out)      {wall:7.1f} s  ({c['owners_done']:,} of "
        f"{c['owners_total']:,} owners done, {c['owners_failed']} failed)"
    )
    print(
        f"  events {events:,} (huge owner {int(huge['events']):,}); documents reminded "
        f"{listed:,}, distinct {distinct:,} of {documents:,}; largest event {largest:,} bytes"
    )
    print(
        f"  ordinary owners done after (median / last): all {med_all:.1f} / {max_all:.1f} s; "
        f"the {len(shared)} on the huge owner's partition {med_shared:.1f} / {max_shared:.1f} s"
    )
    print(f"  huge owner's events from {huge_first:.1f} s to {huge_last:.1f} s")
    print(
        f"  peak RSS: worker {rss:.0f} MB, its timer process {timer_rss:.0f} MB, "
        f"the run's process (scan, fan-out) {run_rss:.0f} MB"
    )
    assert listed == distinct == documents, (listed, distinct, documents)
    assert c["owners_done"] == c["owners_total"] == owners + 1, c
    size = f"{big_documents:,} documents of one owner beside {owners:,} owners of 5"
    return [
        measure(
            "expiry: one huge owner, run time",
            "s",
            wall,
            targets=[Target("<", 600)],
            higher_is_better=False,
            bench="expiry-large",
            detail=size,
        ),
        measure(
            "expiry: one huge owner, last ordinary owner on its partition done after",
            "s",
            max_shared,
            huge_last,
            higher_is_better=False,
            bench="expiry-large",
            detail=size + "; reference: when the huge owner's last event was written",
        ),
        measure(
            "expiry: one huge owner, worker peak RSS",
            "MB",
            rss,
            targets=[Target("<", 300)],
            higher_is_better=False,
            bench="expiry-large",
            detail=size,
        ),
        measure(
            "expiry: one huge owner, largest event",
            "bytes",
            largest,
            targets=[Target("<", 1024 * 1024)],
            higher_is_better=False,
            bench="expiry-large",
            detail=size,
        ),
    ]


QUICK = {"big_documents": 20_000, "owners": 200}
