"""The calendar cache writes its changelog in batches (streams/tables/cache.py, put_many):
the records must be what Faust itself writes, so that a worker that starts with an empty
data dir recovers the table from them and answers replays without PostgreSQL."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import asyncpg
import pytest

from devkit.database import scalar
from devkit.kafka import produce, read_to_end
from devkit.messages.factories import calendar_event, encode
from devkit.observe.metrics import sample
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

EVENTS = "pin.calendar.events.v1"
N = 300


async def count(db: str, sql: str) -> int:
    return int(await scalar(db, sql))


async def updated_marks(db: str) -> list[tuple[uuid.UUID, object]]:
    conn = await asyncpg.connect(db)
    try:
        rows = await conn.fetch("SELECT event_id, updated_at FROM calendar.events ORDER BY 1")
        return [(r[0], r[1]) for r in rows]
    finally:
        await conn.close()


@pytest.mark.timeout(300)
async def test_a_worker_with_an_empty_data_dir_recovers_the_batched_cache_from_its_changelog(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    topic = topic_prefix + EVENTS
    env = worker_env(database_url, kafka_bootstrap, topic_prefix)
    states = [calendar_event(Version=1, ReminderOffsetsMinutes=[60, 15]) for _ in range(N)]
    records = [(m["EventId"], encode(m)) for m in states]

    first = WorkerProcess(env, tmp_path, "first").start()
    try:
        await first.wait_ready()
        await produce(kafka_bootstrap, topic, records)
        await eventually(
            lambda: count(database_url, "SELECT count(*) FROM calendar.events"),
            until=lambda n: n == N,
            timeout=90,
            what=f"{N} events stored",
        )
    finally:
        first.stop()

    # One changelog record per event, keyed and valued as Faust's JSON table schema has it.
    changelog = f"{topic_prefix}reminders-calendar-event-cache-changelog"
    logged = await read_to_end(kafka_bootstrap, changelog)
    by_key = {json.loads(r.key): json.loads(r.value) for r in logged}
    assert set(by_key) == {m["EventId"] for m in states}
    assert {v["v"] for v in by_key.values()} == {1}
    # Each record sits in the changelog partition of the input message it came from.
    inputs = {
        json.loads(r.value)["EventId"]: r.partition
        for r in await read_to_end(kafka_bootstrap, topic)
    }
    assert all(inputs[json.loads(r.key)] == r.partition for r in logged)
    before = await updated_marks(database_url)

    # A new data dir: the table exists only in the changelog.
    second = WorkerProcess(env, tmp_path, "second").start()
    try:
        await second.wait_ready()
        await produce(kafka_bootstrap, topic, records)  # every state replayed

        async def hits() -> float:
            return (
                sample(
                    str(second.get("/metrics")[1]),
                    "reminders_stream_table_cache_total",
                    table="calendar-event-cache",
                    result="hit",
                )
                or 0.0
            )

        await eventually(hits, until=lambda n: n >= N, timeout=90, what="replays answered")
        misses = sample(
            str(second.get("/metrics")[1]),
            "reminders_stream_table_cache_total",
            table="calendar-event-cache",
            result="miss",
        )
    finally:
        second.stop()
    assert not misses, misses  # the recovered table knew every key
    assert await updated_marks(database_url) == before  # and PostgreSQL was not written
