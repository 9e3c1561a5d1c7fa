"""A worker killed between its commit and its cache write leaves the cache behind the
database; a later revert to the earlier content must still be stored (issue 21, finding 1).

v1 (StartAt S1) is applied and cached; v2 moves the event to S2 and commits, then the worker
dies at ``applier.after_commit`` (STREAMS_FAULT), so the cache still says v1. A new worker
gets v2 again (never acknowledged: PostgreSQL calls it stale) and then v3, back at S1: its
fingerprint equals the cached v1's, but the stored row's is v2's, so v3 takes the full write.
The reminders for S1 end Pending, those for S2 Skipped.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from devkit.database import scalar
from devkit.kafka import produce
from devkit.messages.factories import calendar_event, encode
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

EVENTS = "pin.calendar.events.v1"


async def stored_version(db: str, event_id: str) -> int:
    v = await scalar(db, "SELECT version FROM calendar.events WHERE event_id = $1::uuid", event_id)
    return int(v or 0)


@pytest.mark.timeout(300)
async def test_a_revert_after_a_lost_cache_write_is_stored(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    topic = topic_prefix + EVENTS
    env = worker_env(database_url, kafka_bootstrap, topic_prefix)
    # Far ahead of the wall clock, so no dispatcher sends any of these reminders meanwhile.
    now = datetime.now(UTC).replace(microsecond=0)
    s1, s2 = now + timedelta(days=30), now + timedelta(days=31)
    v1 = calendar_event(
        EventId=str(uuid.uuid4()),
        StartAt=s1,
        OccurredAt=now,
        ReminderOffsetsMinutes=[60],
        Version=1,
    )
    v2 = {**v1, "StartAt": s2.isoformat(), "Version": 2}
    v3 = {**v1, "Version": 3}
    key = v1["EventId"]

    first = WorkerProcess(env, tmp_path, "worker").start()
    try:
        await first.wait_ready()
        await produce(kafka_bootstrap, topic, [(key, encode(v1))])
        await eventually(
            lambda: stored_version(database_url, key),
            until=lambda v: v == 1,
            timeout=90,
            what="v1 stored",
        )
    finally:
        first.stop()  # a clean stop: the cache (and its changelog) holds v1

    doomed = WorkerProcess({**env, "STREAMS_FAULT": "applier.after_commit"}, tmp_path, "worker")
    doomed.start()
    try:
        await doomed.wait_ready()
        await produce(kafka_bootstrap, topic, [(key, encode(v2))])
        assert doomed.proc is not None
        code = await eventually(
            lambda: doomed.proc.poll() if doomed.proc else None,
            until=lambda c: c is not None,
            timeout=90,
            what="the worker killed after committing v2",
        )
        assert code == -9, doomed.tail()
    finally:
        doomed.kill()
    assert await stored_version(database_url, key) == 2  # committed, never cached

    last = WorkerProcess(env, tmp_path, "worker").start()
    try:
        await last.wait_ready()
        await produce(kafka_bootstrap, topic, [(key, encode(v3))])
        await eventually(
            lambda: stored_version(database_url, key),
            until=lambda v: v == 3,
            timeout=90,
            what="v3 stored",
        )
    finally:
        last.stop()

    conn = await asyncpg.connect(database_url)
    try:
        event = await conn.fetchrow(
            "SELECT version, start_at FROM calendar.events WHERE event_id = $1::uuid", key
        )
        rows = await conn.fetch(
            "SELECT due_at, status FROM calendar.event_reminders WHERE event_id = $1::uuid", key
        )
    finally:
        await conn.close()
    assert event is not None and (event["version"], event["start_at"]) == (3, s1), dict(event or {})
    hour = timedelta(minutes=60)
    assert {(r["due_at"], r["status"]) for r in rows} == {
        (s1 - hour, "Pending"),
        (s2 - hour, "Skipped"),
    }, [dict(r) for r in rows]
