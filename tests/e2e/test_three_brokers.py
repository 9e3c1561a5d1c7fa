"""Three KRaft brokers, replication factor 3, min ISR 2: one broker SIGKILLed under calendar and
document-expiry load, then another after the first is back. Nothing lost, nothing doubled.

The stack is private (stack/stack.sh with STACK_KAFKA_BROKERS=3 and STACK_PG_DURABLE=1 under
a temporary DEV_DIR). Inputs come from a plain aiokafka producer; the judge is the output
topics alone, read to their end offsets, against what the inputs ask for.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from devkit.database import scalar
from devkit.harness.profile import person_document
from devkit.kafka import produce, read_to_end
from devkit.messages.factories import calendar_event, encode
from devkit.stacks.private_stack import PrivateStack
from devkit.stacks.stack_shapes import service_env, shaped_stack, streams_cli
from devkit.wait import eventually
from devkit.workers import ROOT, WorkerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.deployment]

EVENTS = "pin.calendar.events.v1"
DUE = "pin.calendar.reminder-due.v1"
DOCUMENTS = "pin.profile.person-documents.v1"
EXPIRY = "pin.profile.document-expiry-reminders.v1"
UNPUBLISHED = "SELECT count(*) FROM ops.outbox WHERE published_at IS NULL"


@pytest.fixture
def three_brokers() -> Iterator[tuple[PrivateStack, dict[str, str]]]:
    with shaped_stack(STACK_KAFKA_BROKERS="3", STACK_PG_DURABLE="1") as (stack, client):
        assert client["KAFKA_REPLICATION_FACTOR"] == "3", client
        yield stack, client


def _node(stack: PrivateStack, command: str, n: int) -> None:
    done = subprocess.run(
        [str(ROOT / "stack" / "stack.sh"), command, str(n)],
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]


async def _min_isr_of(bootstrap: str, topic: str) -> tuple[int, str]:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
        replicas = len(described[0]["partitions"][0]["replicas"])
        configs = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        entries = {e[0]: e[1] for e in configs[0].resources[0][4]}
        return replicas, entries["min.insync.replicas"]
    finally:
        await admin.close()


@pytest.mark.timeout(420)
async def test_killing_two_brokers_in_turn_loses_and_doubles_nothing(
    three_brokers: tuple[PrivateStack, dict[str, str]], tmp_path: Path
) -> None:
    stack, client = three_brokers
    bootstrap, database = client["KAFKA_BOOTSTRAP"], client["DATABASE_URL"]
    prefix = f"t{uuid.uuid4().hex[:8]}."
    # The document-expiry run is started by hand, mid-outage, below.
    env = service_env(client, prefix, TIMER_DOCUMENT_EXPIRY_ENABLED="false")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return streams_cli(env, *args)

    for command in (["migrate"], ["topics"]):
        done = cli(*command)
        assert done.returncode == 0, done.stdout + done.stderr
    # Every topic the service makes is replicated three times with min ISR 2.
    assert await _min_isr_of(bootstrap, prefix + DUE) == (3, "2")

    workers = [WorkerProcess(env, tmp_path, f"w{i}").start() for i in (1, 2)]
    recoveries: list[tuple[str, float]] = []
    windows: list[tuple[int, datetime, float]] = []
    try:
        await asyncio.gather(*(w.wait_ready(timeout=150) for w in workers))
        changelogs = [
            t for t in await _topics(bootstrap) if t.startswith(prefix) and "changelog" in t
        ]
        assert changelogs, "the workers made their table changelogs"
        assert await _min_isr_of(bootstrap, changelogs[0]) == (3, "2")

        # Reminders come due over 80 s, starting 10 s from now; documents expire in 7 days.
        now = datetime.now(UTC)
        events = [
            calendar_event(StartAt=now + timedelta(seconds=70 + i // 2), ReminderOffsetsMinutes=[1])
            for i in range(160)
        ]
        owners = [str(uuid.uuid4()) for _ in range(60)]
        today = now.date()
        documents = [
            person_document(OwnerUserId=o, ExpiresAt=today + timedelta(days=7)) for o in owners
        ] + [person_document(OwnerUserId=o, ExpiresAt=today + timedelta(days=1)) for o in owners]
        await produce(
            bootstrap, prefix + DOCUMENTS, [(d["OwnerUserId"], encode(d)) for d in documents]
        )
        await produce(bootstrap, prefix + EVENTS, [(e["EventId"], encode(e)) for e in events])

        async def outage(node: int, at: float, down_for: float, during: object = None) -> None:
            await asyncio.sleep(at)
            _node(stack, "node-kill", node)
            killed = time.monotonic()
            windows.append((node, datetime.now(UTC), down_for))
            if during is not None:
                await during  # type: ignore[misc]
            await asyncio.sleep(max(0.0, down_for - (time.monotonic() - killed)))
            await asyncio.to_thread(_node, stack, "node-up", node)
            # Recovered: everything committed so far is published again.
            await eventually(
                lambda: scalar(database, UNPUBLISHED),
                until=lambda n: n == 0,
                timeout=120,
                what="outbox drained",
            )
            recoveries.append((f"broker {node} killed", time.monotonic() - killed))

        async def expiry_run() -> None:
            await eventually(
                lambda: scalar(database, "SELECT count(*) FROM profile.person_documents"),
                until=lambda n: n == len(documents),
                timeout=60,
                what="documents stored",
            )
            done = await asyncio.to_thread(cli, "timers", "run", "document-expiry")
            assert done.returncode == 0, done.stdout + done.stderr

        # Broker 2 dies 10 s in (reminders start coming due), comes back after 25 s; broker 3
        # dies once 2 is back, and the daily document-expiry run happens while it is down.
        await outage(2, 10, 25)
        await outage(3, 0, 25, expiry_run())

        async def all_sent() -> int:
            return int(
                await scalar(
                    database,
                    "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent'",
                )
            )

        await eventually(all_sent, until=lambda n: n == len(events), timeout=120, what="all Sent")
        await eventually(
            lambda: scalar(database, UNPUBLISHED),
            until=lambda n: n == 0,
            timeout=60,
            what="drained",
        )
    finally:
        for w in workers:
            w.stop()

    due_records = await read_to_end(bootstrap, prefix + DUE)
    due = Counter(json.loads(r.value)["EventId"] for r in due_records)
    # Lateness: when the relay sent it (the record's timestamp) - DueAt (StartAt - 1 min).
    lateness = []
    for r in due_records:
        due_at = datetime.fromisoformat(json.loads(r.value)["StartAt"]) - timedelta(minutes=1)
        lateness.append((due_at, r.timestamp / 1000 - due_at.timestamp()))
    expiry = Counter(
        (d["DocumentId"], d["ThresholdDays"])
        for r in await read_to_end(bootstrap, prefix + EXPIRY)
        for d in json.loads(r.value)["Documents"]
    )
    wanted_due = {e["EventId"] for e in events}
    wanted_docs = {d["DocumentId"] for d in documents}
    rows = [
        (
            "calendar reminders",
            len(wanted_due),
            sum(due.values()),
            len(wanted_due - set(due)),
            sum(n - 1 for n in due.values() if n > 1),
        ),
        (
            "document reminders",
            len(wanted_docs),
            sum(expiry.values()),
            len(wanted_docs - {d for d, _ in expiry}),
            sum(n - 1 for n in expiry.values() if n > 1),
        ),
    ]
    print("\nthree brokers, RF 3, min ISR 2")
    print(f"{'effects':<20} {'expected':>8} {'published':>9} {'missing':>7} {'doubled':>7}")
    for name, expected, published, missing, doubled in rows:
        print(f"{name:<20} {expected:>8} {published:>9} {missing:>7} {doubled:>7}")
    for what, seconds in recoveries:
        print(f"{what}: outbox drained again {seconds:.1f} s after the kill (down 25 s)")
    for node, killed_at, down_for in windows:
        end = killed_at + timedelta(seconds=down_for)
        during = sorted(late for at, late in lateness if killed_at <= at <= end)
        if during:
            print(
                f"broker {node} down: {len(during)} reminders came due; lateness max"
                f" {during[-1]:.2f} s, median {during[len(during) // 2]:.2f} s"
            )
    print(f"all reminders: lateness max {max(late for _, late in lateness):.2f} s")
    assert [r[3:] for r in rows] == [(0, 0), (0, 0)], rows
    assert len({d for d, _ in expiry}) == len(wanted_docs)


async def _topics(bootstrap: str) -> list[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return list(await admin.list_topics())
    finally:
        await admin.close()
