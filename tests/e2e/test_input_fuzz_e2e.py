"""Hundreds of hostile records on the real input topic, against a real worker process.

A plain AIOKafkaProducer (not the project's code) writes random bytes, null keys, null
values, records with neither, tz folder names, wrong types, missing fields, extreme
instants and numbers, and values just under the broker's max message size, interleaved
with valid events (several Versions per EventId, shuffled), then a valid sentinel as the
last record of every partition. The worker must stay alive and ready, apply the valid
ones, and put every hostile record, exactly once, on the real DLQ topic with a reason.

The records come from a seeded ``random.Random`` over the value pools of
devkit/messages/fuzz.py (Hypothesis cannot drive one worker process per example); the seed
is printed, and ``FUZZ_SEED=<n>`` replays a run.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from devkit.kafka import read_to_end
from devkit.messages.factories import calendar_event
from devkit.messages.fuzz import (
    HUGE_STRINGS,
    INSTANT_EXTREMES,
    NUMBER_EXTREMES,
    PII_MARKER,
    STRUCTURAL,
    TZ_FOLDERS,
    TZ_NOT_ZONES,
    encode,
)
from devkit.wait import NotWithin, eventually
from devkit.workers import WorkerProcess, worker_env
from streams.contracts import CALENDAR_EVENTS, ContractError, decode
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

EVENTS = "pin.calendar.events.v1"
PARTITIONS = 4
N_HOSTILE = 300
N_VALID_EVENTS = 60
N_HUGE = 4  # hostile values just under the broker's limit (one more valid one)
SEED = int(os.environ.get("FUZZ_SEED") or random.SystemRandom().randrange(2**32))


@dataclass
class Produced:
    key: bytes | None
    value: bytes | None
    hostile: bool
    why: str
    partition: int | None = None  # None: the producer's partitioner picks (by key)
    event_id: str | None = None
    version: int | None = None
    offset: int = -1  # filled in once Kafka acknowledged the record


@pytest.fixture(scope="module")
def stack(
    module_database_url: str, kafka_bootstrap: str, module_topic_prefix: str, module_tmp: Path
) -> Iterator[dict[str, Any]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=module_topic_prefix)
    asyncio.run(ensure_topics(settings, contract_topic_names(settings)))
    env = worker_env(module_database_url, kafka_bootstrap, module_topic_prefix)
    worker = WorkerProcess(env, module_tmp, "fuzz-worker").start()
    try:
        asyncio.run(worker.wait_ready())
        yield {
            "db": module_database_url,
            "kafka": kafka_bootstrap,
            "topic": module_topic_prefix + EVENTS,
            "dlq": module_topic_prefix + EVENTS + ".dlq",
            "group": module_topic_prefix + "reminders",
            "worker": worker,
        }
    finally:
        worker.stop()


async def max_message_bytes(bootstrap: str, topic: str) -> int:
    """The topic's max.message.bytes as the broker reports it (default 1048588)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        for resource in response.resources:
            for entry in resource[4]:
                if entry[0] == "max.message.bytes":
                    return int(entry[1])
    finally:
        await admin.close()
    raise AssertionError(f"max.message.bytes of {topic} not reported")


async def everything_committed(bootstrap: str, group: str, topic: str) -> bool:
    """The group's committed offset is the end of every partition of ``topic``: every record
    was handled (offsets are committed only up to what was acked, and acks go in order)."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await reader.start()
    try:
        committed = await admin.list_consumer_group_offsets(group, partitions=tps)
        ends = await reader.end_offsets(tps)
    finally:
        await reader.stop()
        await admin.close()
    return all(tp in committed and committed[tp].offset == ends[tp] for tp in tps)


def rejected(value: bytes) -> bool:
    try:
        decode(CALENDAR_EVENTS, value)
    except ContractError:
        return True
    return False


def hostile_records(rng: random.Random, n: int, huge_size: int, ids: list[str]) -> list[Produced]:
    """``n`` records that must all be dead-lettered, of every kind, keyed like real ones
    (an existing EventId), by garbage, or not at all."""
    pools: dict[str, list[Any]] = {
        "instant": list(INSTANT_EXTREMES),
        "number": list(NUMBER_EXTREMES),
        "structural": list(STRUCTURAL),
        "huge-string": list(HUGE_STRINGS[:3]),
    }
    out: list[Produced] = []

    def key() -> bytes | None:
        return rng.choice(
            [rng.choice(ids).encode(), None, rng.randbytes(rng.randint(0, 16)), b"\xff\xfe"]
        )

    def event() -> dict[str, Any]:
        # An existing EventId and a Version above any valid one: if it were applied, the
        # projection would show it.
        return calendar_event(EventId=rng.choice(ids), Version=100 + rng.randint(0, 100))

    kinds = [
        "random-bytes",
        "null-value",
        "null-key-and-value",
        "null-key",
        "tz-folder",
        "tz-not-a-zone",
        "wrong-type",
        "missing-field",
        "contract-version",
        "not-an-object",
        "nul-in-kind",
        "pii",
    ]
    for i in range(n):
        kind = kinds[i % len(kinds)]
        if kind == "random-bytes":
            out.append(Produced(key(), b"\xff" + rng.randbytes(rng.randint(0, 400)), True, kind))
        elif kind == "null-value":
            out.append(Produced(rng.choice(ids).encode(), None, True, kind))
        elif kind == "null-key-and-value":
            out.append(Produced(None, None, True, kind))
        elif kind == "null-key":
            out.append(Produced(None, rng.randbytes(rng.randint(1, 64)) + b"{", True, kind))
        elif kind == "tz-folder":
            e = event()
            out.append(
                Produced(
                    e["EventId"].encode(),
                    encode({**e, "TimeZone": rng.choice(TZ_FOLDERS)}),
                    True,
                    kind,
                )
            )
        elif kind == "tz-not-a-zone":
            e = event()
            tz = rng.choice(TZ_NOT_ZONES)
            out.append(Produced(e["EventId"].encode(), encode({**e, "TimeZone": tz}), True, kind))
        elif kind == "wrong-type":
            # A field set to an extreme or wrongly typed value; the few that the contract
            # accepts (e.g. an in-range instant) are drawn again.
            while True:
                e = event()
                field = rng.choice(
                    ["StartAt", "OccurredAt", "Version", "Status", "EventId", "Kind"]
                )
                pool = "instant" if field.endswith("At") else rng.choice(["number", "structural"])
                value = encode({**e, field: rng.choice(pools[pool])})
                if rejected(value):
                    break
            out.append(Produced(key(), value, True, f"{kind} {field}"))
        elif kind == "missing-field":
            e = event()
            del e[rng.choice(["EventId", "StartAt", "TimeZone", "Status", "Version", "Kind"])]
            out.append(Produced(key(), encode(e), True, kind))
        elif kind == "contract-version":
            e = event()
            cv = rng.choice([0, 2, "1", None, 2**63, "v1"])
            out.append(Produced(key(), encode({**e, "ContractVersion": cv}), True, kind))
        elif kind == "not-an-object":
            value = rng.choice([b"null", b"[]", b"1", b'"x"', b"", b"{", b"\xef\xbb\xbf{}"])
            out.append(Produced(key(), value, True, kind))
        elif kind == "pii":
            # Values that look like personal data: no log line or DLQ reason may echo them.
            e = event()
            field = rng.choice(["Kind", "TimeZone", "EventId", "Status", "StartAt"])
            secret = PII_MARKER + ("x" * 80 if field == "Kind" else "")
            out.append(Produced(key(), encode({**e, field: secret}), True, f"{kind} {field}"))
        else:  # decodes, but PostgreSQL text cannot hold NUL
            e = event()
            out.append(
                Produced(e["EventId"].encode(), encode({**e, "Kind": "Me\x00et"}), True, kind)
            )
    for _ in range(N_HUGE):
        e = event()
        body = encode({**e, "Kind": ""})  # invalid (Kind empty) however large it is
        filler = huge_size - len(body) - len(b', "Pad": ""')
        value = body[:-1] + b', "Pad": "' + b"x" * filler + b'"}'
        assert len(value) == huge_size
        out.append(Produced(e["EventId"].encode(), value, True, "huge"))
    return out


def valid_records(rng: random.Random, huge_size: int) -> tuple[list[Produced], list[str]]:
    out: list[Produced] = []
    ids: list[str] = []
    for _ in range(N_VALID_EVENTS):
        base = calendar_event(ReminderOffsetsMinutes=rng.sample([0, 15, 60, 1440], 2))
        ids.append(base["EventId"])
        for version in rng.sample(range(1, 10), rng.randint(1, 3)):
            msg = {**base, "Version": version, "Kind": f"v{version}"}
            out.append(
                Produced(
                    base["EventId"].encode(),
                    encode(msg),
                    False,
                    "valid",
                    None,
                    base["EventId"],
                    version,
                )
            )
    # A valid event whose value is almost as large as the broker allows (an unknown extra
    # field carries the bulk): it is applied, not dead-lettered.
    big = calendar_event(Version=1)
    body = encode(big)
    filler = huge_size - len(body) - len(b', "Extra": ""')
    value = body[:-1] + b', "Extra": "' + b"y" * filler + b'"}'
    out.append(
        Produced(big["EventId"].encode(), value, False, "valid-huge", None, big["EventId"], 1)
    )
    ids.append(big["EventId"])
    return out, ids


async def produce_all(bootstrap: str, topic: str, records: list[Produced]) -> None:
    """Send in order with a plain producer; records with neither key nor value go through
    the batch API (aiokafka's send() refuses them, Kafka and other clients do not)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", max_request_size=4 * 1024 * 1024, linger_ms=5
    )
    await producer.start()
    try:
        pending = []
        for r in records:
            if r.key is None and r.value is None:
                partition = r.partition if r.partition is not None else random.randrange(PARTITIONS)
                batch = producer.create_batch()
                batch.append(key=None, value=None, timestamp=None)
                pending.append((r, await producer.send_batch(batch, topic, partition=partition)))
            else:
                pending.append(
                    (r, await producer.send(topic, key=r.key, value=r.value, partition=r.partition))
                )
        for r, fut in pending:
            meta = await fut
            r.partition, r.offset = meta.partition, meta.offset
    finally:
        await producer.stop()


async def test_hostile_records_are_dead_lettered_and_valid_ones_applied(
    stack: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    rng = random.Random(SEED)
    worker: WorkerProcess = stack["worker"]
    limit = await max_message_bytes(stack["kafka"], stack["topic"])
    # Just under the limit: room for the record and batch framing (key, headers, CRC).
    huge_size = limit - 512
    valid, ids = valid_records(rng, huge_size)
    hostile = hostile_records(rng, N_HOSTILE, huge_size, ids)
    records = valid + hostile
    rng.shuffle(records)
    sentinels = []
    for p in range(PARTITIONS):
        s = calendar_event(Version=1, Kind="sentinel")
        sentinels.append(
            Produced(s["EventId"].encode(), encode(s), False, "sentinel", p, s["EventId"], 1)
        )
    await produce_all(stack["kafka"], stack["topic"], records + sentinels)

    conn = await asyncpg.connect(stack["db"])
    health: list[tuple[int, Any]] = []  # /health, sampled while the records are consumed
    try:

        async def sentinels_applied() -> bool:
            n = await conn.fetchval(
                "SELECT count(*) FROM calendar.events WHERE event_id = ANY($1::uuid[])",
                [s.event_id for s in sentinels],
            )
            assert worker.proc is not None and worker.proc.poll() is None, worker.tail()
            status, body = await asyncio.to_thread(worker.get, "/health")
            health.append((status, body))
            return bool(n == len(sentinels))

        await eventually(
            sentinels_applied, timeout=120, what="every partition's sentinel", interval=0.25
        )
        # A sentinel can be stored while an earlier batch is still applying (two batches in
        # flight); the committed offsets reaching the end say every record was handled.
        await eventually(
            lambda: everything_committed(stack["kafka"], stack["group"], stack["topic"]),
            timeout=60,
            what="offsets committed to the end of every partition",
            interval=0.25,
        )
        stored = {
            str(r["event_id"]): (r["version"], r["kind"])
            for r in await conn.fetch("SELECT event_id, version, kind FROM calendar.events")
        }
    finally:
        await conn.close()

    # The worker stayed up and ready all along, and says so.
    assert worker.proc is not None and worker.proc.poll() is None, worker.tail()
    health.append(worker.get("/health"))
    assert [h for h in health if h[0] != 200] == [], worker.tail()

    # Valid records: the projection holds the newest Version of every EventId.
    newest: dict[str, int] = {}
    for r in valid + sentinels:
        assert r.event_id is not None and r.version is not None
        newest[r.event_id] = max(newest.get(r.event_id, 0), r.version)
    assert {eid: stored.get(eid, (None,))[0] for eid in newest} == newest

    # Hostile records: every one on the DLQ, once, with its reason; no valid one there.
    def ours(recs: list[Any]) -> list[Any]:
        return [
            r for r in recs if dict(r.headers).get("dlq-source-topic") == stack["topic"].encode()
        ]

    want = {(r.partition, r.offset): r for r in hostile}

    # Each DLQ write is acknowledged before its input is, and the sentinels came last on
    # every partition: the DLQ is complete now. A short grace only guards the read.
    async def dead_letters() -> list[Any]:
        return ours(await read_to_end(stack["kafka"], stack["dlq"]))

    try:
        dead = await eventually(
            dead_letters,
            timeout=15,
            what="every hostile record on the DLQ",
            until=lambda d: len(d) >= len(want),
            interval=0.5,
        )
    except NotWithin:
        dead = await dead_letters()  # the checks below name what is missing
    got: dict[tuple[int, int], Any] = {}
    for d in dead:
        h = dict(d.headers)
        coords = (int(h["dlq-source-partition"]), int(h["dlq-source-offset"]))
        assert coords not in got, f"dead-lettered twice: {coords}"
        got[coords] = d
    valid_coords = {(r.partition, r.offset) for r in valid + sentinels}
    assert not set(got) & valid_coords, "a valid record was dead-lettered"
    missing = [want[c].why for c in set(want) - set(got)]
    assert not missing, f"hostile records not on the DLQ: {missing}"
    assert set(got) == set(want)
    kinds: dict[str, int] = {}
    for coords, d in got.items():
        h = dict(d.headers)
        assert h.get("dlq-reason"), (coords, h)
        kind = h["dlq-error-kind"].decode()
        kinds[kind] = kinds.get(kind, 0) + 1
        # "decode" would mean the decoder raised something else than ContractError (a bug
        # the DLQ only contains); "processing" is the database refusing the NUL records.
        assert kind in ("json", "schema", "contract-version", "processing"), (kind, h)
        assert kind != "processing" or want[coords].why == "nul-in-kind", (kind, h)
        src = want[coords]
        if src.value is not None and len(src.value) < 64 * 1024:
            assert d.value == src.value and d.key == src.key, coords  # kept byte for byte
        if src.why == "huge":
            assert h.get("dlq-value-truncated") == b"true" and src.value is not None
            assert src.value.startswith(d.value)

    reasons = b"".join(dict(d.headers)["dlq-reason"] for d in got.values())
    assert PII_MARKER.encode() not in reasons, "a DLQ reason echoes an input value"
    assert PII_MARKER not in worker.log_path.read_text(errors="replace"), "PII in the log"

    status, body = worker.get("/metrics")
    assert status == 200
    dlq_total = sum(
        float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith("reminders_stream_messages_total{") and 'result="dlq"' in line
    )
    assert dlq_total == len(hostile), body
    line = (
        f"seed {SEED}: {len(hostile)} hostile records dead-lettered by kind {json.dumps(kinds)}, "
        f"{len(valid)} valid records ({len(newest)} events incl. sentinels), "
        f"huge values {huge_size} bytes (max.message.bytes {limit})"
    )
    print(line)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            reporter.write_line(f"\n[fuzz-e2e] {line}")
