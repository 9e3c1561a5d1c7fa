"""PayloadCipher is never stored, not even by the DLQ: person documents with a known cipher
(one malformed in another field, one not JSON, one valid) go through a real worker; the
cipher is then on no topic of the test's prefix but the input topic itself, in no row of
the database, and in no line of the worker's log."""

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
from aiokafka.admin import AIOKafkaAdminClient

from devkit.harness.profile import person_document
from devkit.kafka import read_to_end
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

DOCUMENTS = "pin.profile.person-documents.v1"
CIPHER = f"CIPHER-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def stack(
    module_database_url: str, kafka_bootstrap: str, module_topic_prefix: str, module_tmp: Path
) -> Iterator[dict[str, Any]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=module_topic_prefix)
    asyncio.run(ensure_topics(settings, contract_topic_names(settings)))
    env = worker_env(module_database_url, kafka_bootstrap, module_topic_prefix)
    worker = WorkerProcess(env, module_tmp, "secrets-worker").start()
    try:
        asyncio.run(worker.wait_ready())
        yield {
            "db": module_database_url,
            "kafka": kafka_bootstrap,
            "prefix": module_topic_prefix,
            "worker": worker,
        }
    finally:
        worker.stop()


async def _send(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for key, value in records:
            await (await producer.send(topic, key=key, value=value))
    finally:
        await producer.stop()


async def _topics(bootstrap: str, prefix: str) -> list[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return sorted(t for t in await admin.list_topics() if t.startswith(prefix))
    finally:
        await admin.close()


async def _rows_holding(db: str, needle: str) -> list[str]:
    """Every table of every schema but PostgreSQL's own, searched row by row as text."""
    conn = await asyncpg.connect(db)
    try:
        tables = await conn.fetch(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
            " AND table_type = 'BASE TABLE'"
        )
        hits = []
        for t in tables:
            name = f'"{t["table_schema"]}"."{t["table_name"]}"'
            if await conn.fetchval(f"SELECT count(*) FROM {name} r WHERE r::text LIKE $1", needle):
                hits.append(name)
        return hits
    finally:
        await conn.close()


@pytest.mark.timeout(300)  # module worker start 90 + DLQ 60 + reads
async def test_payload_cipher_is_on_no_topic_in_no_table_and_in_no_log(
    stack: dict[str, Any],
) -> None:
    bootstrap, prefix, db = stack["kafka"], stack["prefix"], stack["db"]
    source = prefix + DOCUMENTS
    valid = person_document(DaysLeft=20, PayloadCipher=CIPHER)
    malformed = person_document(DaysLeft=20, PayloadCipher=CIPHER, Version="not-a-number")
    owner = malformed["OwnerUserId"].encode()
    not_json = b'{"PayloadCipher": "%s", "Version": ' % CIPHER.encode()
    await _send(
        bootstrap,
        source,
        [
            (owner, json.dumps(malformed).encode()),
            (owner, not_json),
            (valid["OwnerUserId"].encode(), json.dumps(valid).encode()),
        ],
    )

    async def stored() -> object:
        conn = await asyncpg.connect(db)
        try:
            return await conn.fetchval(
                "SELECT count(*) FROM profile.person_documents WHERE document_id = $1::uuid",
                valid["DocumentId"],
            )
        finally:
            await conn.close()

    await eventually(stored, timeout=60, what="the valid document applied")
    dead = await eventually(
        lambda: read_to_end(bootstrap, source + ".dlq"),
        timeout=60,
        what="both bad documents dead-lettered",
        until=lambda records: len(records) == 2,
        interval=0.5,
    )
    by_kind = {dict(r.headers)["dlq-error-kind"]: r for r in dead}
    schema, bad_json = by_kind[b"schema"], by_kind[b"json"]
    # The schema failure keeps everything but the cipher; the unparseable one is withheld.
    assert dict(schema.headers)["dlq-redacted"] == b"PayloadCipher"
    assert schema.value is not None
    kept = json.loads(schema.value)
    assert kept == {k: v for k, v in malformed.items() if k != "PayloadCipher"}
    assert dict(bad_json.headers)["dlq-redacted"] == b"*" and bad_json.value == b""

    needle = CIPHER.encode()
    topics = await _topics(bootstrap, prefix)
    assert source in topics and source + ".dlq" in topics
    assert any("changelog" in t for t in topics)  # the worker's tables are searched too
    on_topics = []
    for topic in topics:
        if topic == source:
            continue  # where the producer put it
        for r in await read_to_end(bootstrap, topic):
            parts = [r.key or b"", r.value or b"", *(v or b"" for _, v in r.headers)]
            if any(needle in p for p in parts):
                on_topics.append(f"{topic}@{r.partition}:{r.offset}")
    assert on_topics == []
    assert await _rows_holding(db, f"%{CIPHER}%") == []
    # The search sees what is stored: the valid document's row is found by its id.
    assert await _rows_holding(db, f"%{valid['DocumentId']}%") != []
    assert CIPHER not in stack["worker"].log_path.read_text(errors="replace")
