"""Least privilege on a Kafka with an authorizer (SASL_SSL, KRaft's StandardAuthorizer, no ACL
means no access): the ``topics`` hook with exactly its ACLs makes the topics, and the worker
with exactly its own (``required_acls``, docs/deploy.md "Kafka ACLs") gets ready and sends
a due reminder; with any one of those ACLs taken away the command exits 2 naming the
operation and the resource to grant, in seconds, without a traceback."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from devkit.database import scalar
from devkit.kafka import produce, read_to_end
from devkit.kafka_acls import grant, revoke
from devkit.messages.factories import calendar_event, encode
from devkit.stacks.stack_shapes import service_env, shaped_stack, streams_cli
from devkit.wait import eventually
from devkit.workers import WorkerProcess
from streams.kafka_access import AclRule, required_acls
from streams.kafka_client import client_options, security_options
from streams.settings import Settings

pytestmark = [pytest.mark.e2e, pytest.mark.deployment]

PRINCIPAL = "User:reminders"


@pytest.fixture(scope="module")
def acl_stack() -> Iterator[dict[str, str]]:
    shape = {
        "STACK_KAFKA_SECURITY": "sasl_ssl",
        "STACK_KAFKA_ACLS": "true",
        "STACK_KAFKA_AUTO_CREATE": "false",
    }
    with shaped_stack(**shape) as (_, client):
        assert client["STACK_KAFKA_ADMIN_USERNAME"], client
        yield client


def settings_of(client: dict[str, str], prefix: str, **override: str) -> Settings:
    kafka = {k.lower(): v for k, v in client.items() if k.startswith("KAFKA_")}
    return Settings(**{**kafka, **override}, topic_prefix=prefix, app_id=f"{prefix}reminders")


def admin(client: dict[str, str]) -> dict[str, Any]:
    return client_options(
        settings_of(
            client,
            "",
            kafka_sasl_username=client["STACK_KAFKA_ADMIN_USERNAME"],
            kafka_sasl_password=client["STACK_KAFKA_ADMIN_PASSWORD"],
        )
    )


def rules(client: dict[str, str], prefix: str, who: str, declare: str = "true") -> list[AclRule]:
    settings = settings_of(client, prefix, kafka_declare_internal_topics=declare)
    return [r for r in required_acls(settings) if r.who == who]


def env_of(client: dict[str, str], prefix: str, declare: str = "true") -> dict[str, str]:
    extra = {k: v for k, v in client.items() if k.startswith("STACK_")}
    env = {k: v for k, v in service_env(client, prefix).items() if k not in extra}
    return {**env, "KAFKA_DECLARE_INTERNAL_TOPICS": declare}


def assert_names(done: Any, rule: AclRule) -> None:
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "setting KAFKA_SASL_USERNAME: Kafka denied User:reminders" in output, output[-3000:]
    assert any(f"{op} on {rule.resource} '{rule.name}" in output for op in rule.operations), output[
        -3000:
    ]
    assert "Traceback" not in output and "reminders-secret" not in output


@pytest.mark.timeout(420)
@pytest.mark.parametrize("declare", ["true", "false"])
async def test_the_hook_and_the_worker_each_with_exactly_their_acls(
    acl_stack: dict[str, str], tmp_path: Path, declare: str
) -> None:
    """KAFKA_DECLARE_INTERNAL_TOPICS=false: the worker's ACLs have no Create at all."""
    client = acl_stack
    prefix = f"t{uuid.uuid4().hex[:8]}."
    env = env_of(client, prefix, declare)
    denied = streams_cli(env, "topics", timeout=120)  # no ACL at all
    assert denied.returncode == 2 and "Kafka denied User:reminders" in denied.stderr, denied
    await grant(admin(client), PRINCIPAL, rules(client, prefix, "topics"))
    for command in (["migrate"], ["topics"]):
        done = streams_cli(env, *command)
        assert done.returncode == 0, done.stdout + done.stderr
    # The worker's ACLs only: no Create, DescribeConfigs or AlterConfigs on the contract
    # topics, which the hook made.
    await revoke(admin(client), PRINCIPAL, rules(client, prefix, "topics"))
    worker_rules = rules(client, prefix, "worker", declare)
    assert any("Create" in r.operations for r in worker_rules) == (declare == "true")
    await grant(admin(client), PRINCIPAL, worker_rules)
    worker = WorkerProcess(env, tmp_path, "acl").start()
    try:
        await worker.wait_ready(timeout=150)
        start = datetime.now(UTC) + timedelta(seconds=70)  # due in about 10 s (offset 1 min)
        event = calendar_event(StartAt=start, ReminderOffsetsMinutes=[1])
        security = security_options(settings_of(client, prefix))
        topic = prefix + "pin.calendar.events.v1"
        await produce(
            client["KAFKA_BOOTSTRAP"], topic, [(event["EventId"], encode(event))], security=security
        )
        await eventually(
            lambda: scalar(
                client["DATABASE_URL"],
                "SELECT count(*) FROM ops.outbox WHERE published_at IS NOT NULL"
                f" AND topic = '{prefix}pin.calendar.reminder-due.v1'",
            ),
            until=lambda n: n >= 1,
            timeout=90,
            what="the due reminder published",
        )
        records = await read_to_end(
            client["KAFKA_BOOTSTRAP"], prefix + "pin.calendar.reminder-due.v1", security=security
        )
        assert [json.loads(r.value)["EventId"] for r in records] == [event["EventId"]]
    finally:
        worker.stop()
    log = worker.log_path.read_text(errors="replace")
    assert "AuthorizationFailed" not in log, log[-3000:]


def _cases() -> list[tuple[str, int]]:
    settings = Settings(topic_prefix="x.", app_id="x.reminders")
    return [
        (r.who, i)
        for who in ("topics", "worker")
        for i, r in enumerate([r for r in required_acls(settings) if r.who == who])
    ]


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("who", "index"), _cases())
async def test_without_any_one_acl_the_command_names_it(
    acl_stack: dict[str, str], who: str, index: int
) -> None:
    client = acl_stack
    prefix = f"t{uuid.uuid4().hex[:8]}."
    env = env_of(client, prefix)
    own = rules(client, prefix, who)
    missing = own[index]
    if who == "worker":  # its topics made first, by the hook with the hook's ACLs
        await grant(admin(client), PRINCIPAL, rules(client, prefix, "topics"))
        made = streams_cli(env, "topics")
        assert made.returncode == 0, made.stdout + made.stderr
        await revoke(admin(client), PRINCIPAL, rules(client, prefix, "topics"))
    await grant(admin(client), PRINCIPAL, [r for r in own if r != missing])
    started = time.monotonic()
    done = streams_cli(env, who, timeout=120)
    assert_names(done, missing)
    assert time.monotonic() - started < 60, "a missing ACL is not waited for"
