"""Document expiry with real worker processes: two workers on the same schedule run each slot
once and send each owner one event; simulated days through ``python -m streams timers run
--as-of`` send each (document, threshold) at most once and every document its due t*."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from devkit.harness.expiry_workers import (
    REMINDERS,
    cli,
    expected_reminders,
    poll,
    published,
)
from devkit.harness.profile import CIPHER, Harness, person_document
from devkit.kafka import produce, read_to_end
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import ensure_topics, service_topic_names
from streams.settings import Settings

pytestmark = pytest.mark.e2e

DOCUMENTS = "pin.profile.person-documents.v1"


def start_workers(env: dict[str, str], tmp: Path, n: int = 2) -> list[WorkerProcess]:
    return [WorkerProcess(env, tmp, f"expiry-worker-{i}").start() for i in range(n)]


async def test_two_workers_run_each_slot_once_and_send_each_owner_one_event(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix)
    await ensure_topics(settings, service_topic_names(settings))
    today = datetime.now(UTC).date()
    # The projection is filled before the workers start, so the first slot sees all of it.
    seed = Harness(database_url, now=datetime.now(UTC))
    rnd = random.Random(7)
    docs = []
    for _ in range(40):
        owner = str(uuid.uuid4())
        for _ in range(rnd.randint(1, 3)):
            left = rnd.randint(-3, 30)
            docs.append(person_document(OwnerUserId=owner, ExpiresAt=today + timedelta(days=left)))
    try:
        await seed.apply(*docs)
    finally:
        await seed.close()
    env = worker_env(
        database_url,
        kafka_bootstrap,
        topic_prefix,
        TIMER_DOCUMENT_EXPIRY_INTERVAL_SECONDS="2",
        LOG_LEVEL="info",
    )
    workers = start_workers(env, tmp_path)
    try:
        await asyncio.gather(*(w.wait_ready() for w in workers))
        # From here both workers plan every slot: four more slots, each claimed by one.
        finished = "SELECT count(*) FROM ops.timer_slots WHERE name = 'document-expiry' AND finished_at IS NOT NULL"
        both_up = await poll(database_url, finished, lambda v: True, 5, workers)
        await poll(database_url, finished, lambda v: v >= both_up + 4, 120, workers)
        await published(database_url, workers)
        dedupes = 0.0
        for w in workers:
            status, text = await asyncio.to_thread(w.get, "/metrics")
            assert status == 200
            for line in str(text).splitlines():
                if line.startswith(
                    'reminders_timer_slot_dedupes_total{schedule="document-expiry"}'
                ):
                    dedupes += float(line.split()[-1])
    finally:
        for w in workers:
            w.stop()
    conn = await asyncpg.connect(database_url)
    try:
        per_slot = await conn.fetch(
            "SELECT slot, count(*) AS n, sum(reminders_sent) AS sent "
            "FROM profile.document_expiry_runs GROUP BY slot ORDER BY slot"
        )
    finally:
        await conn.close()
    # Each slot ran once across both workers; the other worker's claim lost at least once.
    assert all(r["n"] == 1 for r in per_slot), per_slot
    assert dedupes >= 1
    records = await read_to_end(kafka_bootstrap, topic_prefix + REMINDERS)
    events = [json.loads(r.value) for r in records]
    owners = {d["OwnerUserId"] for d in docs}
    assert sorted(e["OwnerUserId"] for e in events) == sorted(owners)  # one event per owner
    sent = [(d["DocumentId"], d["ThresholdDays"]) for e in events for d in e["Documents"]]
    assert len(sent) == len(set(sent)) == len(docs)
    assert sum(r["sent"] for r in per_slot) == len(docs)
    assert all(
        r.key is not None and r.key.decode() == json.loads(r.value)["OwnerUserId"] for r in records
    )


def count_of(output: str, name: str) -> int:
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            return int(parts[1])
    raise AssertionError(f"no {name} in:\n{output}")


async def test_simulated_days_send_each_document_threshold_at_most_once_and_every_due_t_star(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix)
    await ensure_topics(settings, service_topic_names(settings))
    first_day = datetime.now(UTC).date() - timedelta(days=30)
    days = [first_day + timedelta(days=k) for k in range(12)]
    rnd = random.Random(11)
    docs = []
    for _ in range(25):
        owner = str(uuid.uuid4())
        for _ in range(rnd.randint(1, 3)):
            left = rnd.randint(-2, 42)
            docs.append(
                person_document(OwnerUserId=owner, ExpiresAt=first_day + timedelta(days=left))
            )
    env = worker_env(
        database_url, kafka_bootstrap, topic_prefix, TIMER_DOCUMENT_EXPIRY_ENABLED="false"
    )
    workers = start_workers(env, tmp_path)
    try:
        await asyncio.gather(*(w.wait_ready() for w in workers))
        # The documents arrive through the input topic, with one that is not a document.
        topic = topic_prefix + DOCUMENTS
        await produce(
            kafka_bootstrap,
            topic,
            [(d["OwnerUserId"], json.dumps(d).encode()) for d in docs] + [("x", b"{broken")],
        )
        await poll(
            database_url,
            "SELECT count(*) FROM profile.person_documents",
            lambda v: v == len(docs),
            60,
            workers,
        )
        cli_env = {**env, "WORKER_DATA_DIR": str(tmp_path / "cli"), "WEB_PORT": "1"}
        sent_per_day = {}
        for day in days:
            rc, out = await cli(cli_env, "run", "document-expiry", "--as-of", f"{day}T12:00:00Z")
            assert rc == 0, out
            assert count_of(out, "owners_done") == count_of(out, "owners_total"), out
            sent_per_day[day] = count_of(out, "reminders_sent")
        # The same day again: the slot is claimed (exit 3); --rerun runs it and sends nothing.
        rc, out = await cli(cli_env, "run", "document-expiry", "--as-of", f"{days[3]}T18:00:00Z")
        assert rc == 3 and "deduped" in out, out
        rc, out = await cli(
            cli_env, "run", "document-expiry", "--as-of", f"{days[3]}T18:00:00Z", "--rerun"
        )
        assert rc == 0 and count_of(out, "reminders_sent") == 0, out
        await published(database_url, workers)
        dead = await read_to_end(kafka_bootstrap, topic + ".dlq")
    finally:
        for w in workers:
            w.stop()
    assert len(dead) == 1
    records = await read_to_end(kafka_bootstrap, topic_prefix + REMINDERS)
    got: dict[date, set[tuple[str, int]]] = defaultdict(set)
    sent: list[tuple[str, int]] = []
    for r in records:
        assert CIPHER.encode() not in r.value
        event = json.loads(r.value)
        day = datetime.fromisoformat(event["RemindedAt"]).date()
        for d in event["Documents"]:
            got[day].add((d["DocumentId"], d["ThresholdDays"]))
            sent.append((d["DocumentId"], d["ThresholdDays"]))
    assert len(sent) == len(set(sent)), "a (document, threshold) was reminded twice"
    want = expected_reminders(docs, days)
    assert {d: got.get(d, set()) for d in days} == want
    assert {d: len(want[d]) for d in days} == sent_per_day
    assert sum(len(v) for v in want.values()) > len(docs)  # crossings happened along the days


async def test_a_large_owner_is_claimed_in_chunks_continued_through_the_workers_topic(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix)
    await ensure_topics(settings, service_topic_names(settings))
    now = datetime.now(UTC)
    big = str(uuid.uuid4())
    docs = [
        person_document(OwnerUserId=big, ExpiresAt=now.date() + timedelta(days=3))
        for _ in range(35)
    ]
    docs += [person_document(ExpiresAt=now.date() + timedelta(days=5)) for _ in range(6)]
    seed = Harness(database_url, now=now)
    try:
        await seed.apply(*docs)
    finally:
        await seed.close()
    env = worker_env(
        database_url,
        kafka_bootstrap,
        topic_prefix,
        TIMER_DOCUMENT_EXPIRY_ENABLED="false",
        DOCUMENT_EXPIRY_CLAIM_CHUNK_DOCUMENTS="10",
        DOCUMENT_EXPIRY_MAX_DOCUMENTS_PER_EVENT="4",
    )
    workers = start_workers(env, tmp_path, n=1)
    try:
        await workers[0].wait_ready()
        cli_env = {**env, "WORKER_DATA_DIR": str(tmp_path / "cli"), "WEB_PORT": "1"}
        rc, out = await cli(cli_env, "run", "document-expiry")
        assert rc == 0, out
        assert count_of(out, "owners_done") == count_of(out, "owners_total") == 7, out
        assert count_of(out, "reminders_sent") == len(docs), out
        assert count_of(out, "owners_notified") == 7, out
        await published(database_url, workers)
    finally:
        for w in workers:
            w.stop()
    records = await read_to_end(kafka_bootstrap, topic_prefix + REMINDERS)
    listed = [d["DocumentId"] for r in records for d in json.loads(r.value)["Documents"]]
    assert sorted(listed) == sorted(d["DocumentId"] for d in docs), "each document once"
    assert max(len(json.loads(r.value)["Documents"]) for r in records) <= 4
    big_events = [r for r in records if r.key == big.encode()]
    assert len(big_events) >= 9  # 35 documents, chunks of 10, events of 4
    assert len({dict(r.headers)["correlation-id"] for r in records}) == 1
