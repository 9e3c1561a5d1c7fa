"""A real worker whose statements PostgreSQL refuses with a known value in the DETAIL line
(a unique and a check violation on the person documents projection) dead-letters those
messages without the value: it is in no DLQ header, on none of /status (JSON and HTML),
/timers, /metrics and /health, and in no line of the worker's log."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer

from devkit.harness.profile import person_document
from devkit.kafka import read_to_end
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

DOCUMENTS = "pin.profile.person-documents.v1"
UNIQUE_MARK = f"U{uuid.uuid4().hex[:10]}"
CHECK_MARK = f"C{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def stack(
    module_database_url: str, kafka_bootstrap: str, module_topic_prefix: str, module_tmp: Path
) -> Iterator[dict[str, Any]]:
    async def constrain() -> None:
        conn = await asyncpg.connect(module_database_url)
        try:
            # Constraints the service does not have, so that its own statements fail with
            # the test's values in the server's DETAIL ("Key (number_mask)=(…)", "Failing
            # row contains (…)").
            await conn.execute(
                "CREATE UNIQUE INDEX leak_unique_mask ON profile.person_documents (number_mask)"
            )
            await conn.execute(
                "ALTER TABLE profile.person_documents ADD CONSTRAINT leak_check_mask"
                f" CHECK (number_mask IS DISTINCT FROM '{CHECK_MARK}')"
            )
        finally:
            await conn.close()

    asyncio.run(constrain())
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=module_topic_prefix)
    asyncio.run(ensure_topics(settings, contract_topic_names(settings)))
    env = worker_env(module_database_url, kafka_bootstrap, module_topic_prefix)
    worker = WorkerProcess(env, module_tmp, "leaks-worker").start()
    try:
        asyncio.run(worker.wait_ready())
        yield {"db": module_database_url, "kafka": kafka_bootstrap, "worker": worker}
    finally:
        worker.stop()


@pytest.mark.timeout(300)  # module worker start 90 + DLQ 60 + reads
async def test_refused_statements_leave_their_values_nowhere(
    stack: dict[str, Any], module_topic_prefix: str
) -> None:
    bootstrap, worker = stack["kafka"], stack["worker"]
    source = module_topic_prefix + DOCUMENTS
    first = person_document(DaysLeft=20, NumberMask=UNIQUE_MARK)
    duplicate = person_document(DaysLeft=20, NumberMask=UNIQUE_MARK)
    checked = person_document(DaysLeft=20, NumberMask=CHECK_MARK)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for doc in (first, duplicate, checked):
            key = doc["OwnerUserId"].encode()
            await (await producer.send(source, key=key, value=json.dumps(doc).encode()))
    finally:
        await producer.stop()

    dead = await eventually(
        lambda: read_to_end(bootstrap, source + ".dlq"),
        timeout=60,
        what="the two refused documents dead-lettered",
        until=lambda records: len(records) == 2,
        interval=0.5,
    )
    headers = [dict(r.headers) for r in dead]
    assert sorted(h["dlq-reason"].decode() for h in headers) == [
        "database rejected the message (SQLSTATE 23505)",
        "database rejected the message (SQLSTATE 23514)",
    ]
    places: dict[str, str] = {"DLQ headers": repr(headers)}
    for path in ("/status", "/status?format=json", "/timers", "/metrics", "/health"):
        status, body = worker.get(path)
        assert status in (200, 503), path
        places[path] = body if isinstance(body, str) else json.dumps(body)
    places["worker log"] = worker.log_path.read_text(errors="replace")
    assert "action=message_failed" in places["worker log"]
    assert "UniqueViolationError" in places["worker log"] or "InputRejected" in places["worker log"]
    found = {
        where: tuple(m for m in (UNIQUE_MARK, CHECK_MARK) if m in text)
        for where, text in places.items()
    }
    assert found == dict.fromkeys(places, ())
