"""A real worker with LOG_FORMAT=json: every line it and its timer process write is a JSON
object with an action; dispatch's seed-000 per-item lines carry their fields and the run's
id and schedule; a person document's known NumberMask and PayloadCipher are in no line."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from devkit.harness.profile import person_document
from devkit.kafka import produce
from devkit.messages.factories import calendar_event, encode
from devkit.seed import seed_reminders
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

EVENTS = "pin.calendar.events.v1"
DOCUMENTS = "pin.profile.person-documents.v1"
MASK = f"M{uuid.uuid4().hex[:10]}"
CIPHER = f"C{uuid.uuid4().hex[:16]}"


async def statuses(db: str) -> dict[str, int]:
    conn = await asyncpg.connect(db)
    try:
        rows = await conn.fetch(
            "SELECT status, count(*) AS n FROM calendar.event_reminders GROUP BY status"
        )
        return {r["status"]: int(r["n"]) for r in rows}
    finally:
        await conn.close()


async def document_count(db: str) -> int:
    conn = await asyncpg.connect(db)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM profile.person_documents"))
    finally:
        await conn.close()


@pytest.mark.timeout(300)  # worker start 90 + waits of 60 s + stop 30
async def test_every_worker_line_is_json_with_the_seed_fields(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    # Two due reminders before the worker starts; one event is then cancelled, so dispatch
    # sends one and skips the other.
    start = datetime.now(UTC) - timedelta(minutes=5)
    assert await seed_reminders(database_url, events=2, offsets=[1], start=start) == 2
    conn = await asyncpg.connect(database_url)
    try:
        cancelled = await conn.fetchval(
            "UPDATE calendar.events SET status = 'Cancelled' WHERE event_id = "
            "(SELECT min(event_id::text)::uuid FROM calendar.events) RETURNING event_id"
        )
        rows = await conn.fetch("SELECT reminder_id, event_id FROM calendar.event_reminders")
    finally:
        await conn.close()
    by_event = {r["event_id"]: r["reminder_id"] for r in rows}
    skipped_id = by_event.pop(cancelled)
    ((sent_event, sent_id),) = by_event.items()
    env = worker_env(
        database_url, kafka_bootstrap, topic_prefix, LOG_FORMAT="json", LOG_LEVEL="debug"
    )
    worker = WorkerProcess(env, tmp_path, "json-logs").start()
    try:
        await worker.wait_ready()
        # Inputs from a plain producer: a calendar event not due for a day, and a person
        # document whose NumberMask and PayloadCipher are known.
        later = calendar_event(StartAt=datetime.now(UTC) + timedelta(days=1))
        doc = person_document(DaysLeft=20, NumberMask=MASK, PayloadCipher=CIPHER)
        await produce(kafka_bootstrap, topic_prefix + EVENTS, [(later["EventId"], encode(later))])
        await produce(
            kafka_bootstrap,
            topic_prefix + DOCUMENTS,
            [(doc["OwnerUserId"], json.dumps(doc).encode())],
        )
        await eventually(
            lambda: statuses(database_url),
            until=lambda s: s.get("Sent") == 1 and s.get("Skipped") == 1,
            timeout=60,
            what="one reminder Sent and one Skipped",
            interval=0.2,
        )
        await eventually(
            lambda: document_count(database_url),
            until=lambda n: n == 1,
            timeout=60,
            what="the person document stored",
            interval=0.2,
        )
    finally:
        worker.stop()
    text = worker.log_path.read_text()
    assert MASK not in text and CIPHER not in text
    lines: list[dict[str, Any]] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            pytest.fail(f"not a JSON line: {raw[:300]!r}")
        assert isinstance(line, dict) and line.get("action"), raw[:300]
        lines.append(line)
    sent = [x for x in lines if x["action"] == "reminder_sent"]
    skipped = [x for x in lines if x["action"] == "reminder_skipped"]
    selected = [x for x in lines if x["action"] == "batch_selected"]
    assert len(sent) == 1 and len(skipped) == 1, (sent, skipped)
    assert sent[0]["reminder_id"] == str(sent_id) and sent[0]["event_id"] == str(sent_event)
    assert sent[0]["offset_minutes"] == 1 and uuid.UUID(sent[0]["tenant_id"])
    assert skipped[0]["reminder_id"] == str(skipped_id)
    assert skipped[0]["event_status"] == "Cancelled"
    assert any(x["count"] == 2 for x in selected), selected
    for line in (*sent, *skipped):
        assert line["schedule"] == "calendar-dispatch" and line["run_id"], line
        assert line["process"] == "timer-process" and "trace_id" not in line
    # One run id per run: the run's cycle_started line (which names its run id itself)
    # and its per-item lines carry the same one.
    started = [
        x for x in lines if x["action"] == "cycle_started" and x["run_id"] == sent[0]["run_id"]
    ]
    assert len(started) == 1 and started[0]["schedule"] == "calendar-dispatch"
    assert skipped[0]["run_id"] == sent[0]["run_id"]
    # The worker's own lines are JSON too (not only the timer process's).
    assert any("process" not in x and x["logger"].startswith("streams") for x in lines)
