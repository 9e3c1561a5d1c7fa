"""A worker on a secured Kafka (SASL_SSL, SCRAM-SHA-512, a CA of the stack's own) and a durable
PostgreSQL: the calendar path end to end, and a wrong password or an untrusted CA stops
startup naming the setting.

The stack is private (stack/stack.sh with STACK_KAFKA_SECURITY=sasl_ssl, STACK_PG_DURABLE=1
under a temporary DEV_DIR): what a platform team's cluster asks of a client, on this machine.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from devkit.database import scalar
from devkit.kafka import produce, read_to_end
from devkit.messages.factories import calendar_event, encode
from devkit.stacks.private_stack import PrivateStack
from devkit.stacks.stack_shapes import service_env, shaped_stack, streams_cli
from devkit.wait import eventually
from devkit.workers import WorkerProcess
from streams.kafka_client import security_options
from streams.settings import Settings

pytestmark = [pytest.mark.e2e, pytest.mark.deployment]

EVENTS = "pin.calendar.events.v1"
DUE = "pin.calendar.reminder-due.v1"


@pytest.fixture(scope="module")
def secured() -> Iterator[tuple[PrivateStack, dict[str, str]]]:
    with shaped_stack(STACK_KAFKA_SECURITY="sasl_ssl", STACK_PG_DURABLE="1") as (stack, client):
        assert client["KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL", client
        yield stack, client


@pytest.mark.timeout(300)
async def test_a_worker_over_sasl_ssl_sends_each_due_reminder_once(
    secured: tuple[PrivateStack, dict[str, str]], tmp_path: Path
) -> None:
    _, client = secured
    prefix = f"t{uuid.uuid4().hex[:8]}."
    env = service_env(client, prefix)
    settings = Settings(
        **{k.lower(): v for k, v in client.items() if k.startswith("KAFKA_")},
        topic_prefix=prefix,
    )
    security = security_options(settings)
    database = client["DATABASE_URL"]
    assert await scalar(database, "SHOW fsync") == "on"
    assert await scalar(database, "SHOW synchronous_commit") == "on"
    for command in (["migrate"], ["topics"]):
        done = streams_cli(env, *command)
        assert done.returncode == 0, done.stdout + done.stderr

    worker = WorkerProcess(env, tmp_path, "secured").start()
    try:
        await worker.wait_ready(timeout=120)
        start = datetime.now(UTC) + timedelta(seconds=70)  # due in about 10 s (offset 1 min)
        events = [calendar_event(StartAt=start, ReminderOffsetsMinutes=[1]) for _ in range(20)]
        await produce(
            client["KAFKA_BOOTSTRAP"],
            prefix + EVENTS,
            [(e["EventId"], encode(e)) for e in events],
            security=security,
        )

        async def sent() -> int:
            return int(
                await scalar(
                    database, "SELECT count(*) FROM calendar.event_reminders WHERE status = 'Sent'"
                )
            )

        await eventually(sent, until=lambda n: n == 20, timeout=90, what="20 reminders Sent")
        await eventually(
            lambda: scalar(database, "SELECT count(*) FROM ops.outbox WHERE published_at IS NULL"),
            until=lambda n: n == 0,
            timeout=60,
            what="outbox published",
        )
        records = await read_to_end(client["KAFKA_BOOTSTRAP"], prefix + DUE, security=security)
        by_event = Counter(json.loads(r.value)["EventId"] for r in records)
        assert by_event == Counter({e["EventId"]: 1 for e in events})
    finally:
        worker.stop()
    log = worker.log_path.read_text(errors="replace")
    assert client["KAFKA_SASL_PASSWORD"] not in log


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("change", "setting"),
    [
        ({"KAFKA_SASL_PASSWORD": "not-the-password"}, "KAFKA_SASL_PASSWORD"),
        ({"KAFKA_SSL_CAFILE": ""}, "KAFKA_SSL_CAFILE"),
        ({"KAFKA_REPLICATION_FACTOR": "3"}, "KAFKA_REPLICATION_FACTOR"),
    ],
)
def test_a_refused_login_an_untrusted_ca_or_too_few_brokers_stop_startup_naming_the_setting(
    secured: tuple[PrivateStack, dict[str, str]], change: dict[str, str], setting: str
) -> None:
    _, client = secured
    env = service_env(client, f"t{uuid.uuid4().hex[:8]}.", **change)
    started = time.monotonic()
    done = streams_cli(env, "worker", timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert f"setting {setting}" in output, output[-3000:]
    assert time.monotonic() - started < 60, "a refused configuration is not waited for"
    assert "not-the-password" not in output


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("change", "setting"),
    [
        ({"KAFKA_SASL_PASSWORD": "not-the-password"}, "KAFKA_SASL_PASSWORD"),
        ({"KAFKA_SSL_CAFILE": ""}, "KAFKA_SSL_CAFILE"),
    ],
)
def test_the_topics_hook_names_a_refused_login_or_an_untrusted_ca(
    secured: tuple[PrivateStack, dict[str, str]], change: dict[str, str], setting: str
) -> None:
    _, client = secured
    env = service_env(client, f"t{uuid.uuid4().hex[:8]}.", **change)
    started = time.monotonic()
    done = streams_cli(env, "topics", timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert f"setting {setting}" in output and "Traceback" not in output, output[-3000:]
    assert time.monotonic() - started < 60, "a refused configuration is not waited for"
    assert "not-the-password" not in output
