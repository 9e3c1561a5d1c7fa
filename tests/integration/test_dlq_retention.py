"""DLQ topics keep their records long enough to be replayed: after `python -m streams topics`
the broker reports retention.ms of KAFKA_DLQ_RETENTION_HOURS (default 7 days) on every
DLQ, including one that existed before with the broker's one-day default; other topics
keep the broker's retention."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from streams.contracts import DLQ_SUFFIX
from streams.kafka_admin import service_topic_names
from streams.settings import Settings
from tests.conftest import KAFKA_BOOTSTRAP

DAY_MS = 24 * 3_600_000
EVENTS = "pin.calendar.events.v1"


@pytest.fixture
async def admin() -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(bootstrap_servers=KAFKA_BOOTSTRAP)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def _configs(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    """The configs of ``names`` once every one of them is described without an error: right
    after a topic is created, the broker that answers may not know it yet (its metadata
    lags the controller's by a moment) and reports UNKNOWN_TOPIC_OR_PARTITION with no
    entries, which is not the topic's configuration."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, n) for n in names]
        )
        resources = response.to_object()["resources"]
        failed = {r["resource_name"]: r["error_code"] for r in resources if r["error_code"]}
        if not failed:
            return {
                r["resource_name"]: {
                    e["config_names"]: e["config_value"] for e in r["config_entries"]
                }
                for r in resources
            }
        assert loop.time() < deadline, f"configs not described within 30 s: {failed}"
        await asyncio.sleep(0.1)


def _topics_command(prefix: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "streams", "topics"],
        env={**os.environ, "KAFKA_BOOTSTRAP": KAFKA_BOOTSTRAP, "TOPIC_PREFIX": prefix, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.timeout(240)
async def test_streams_topics_gives_every_dlq_seven_days_and_fixes_an_existing_one(
    admin: AIOKafkaAdminClient,
) -> None:
    prefix = f"ret-{uuid.uuid4().hex[:8]}."
    names = service_topic_names(Settings(topic_prefix=prefix))
    dlqs = [n for n in names if n.endswith(DLQ_SUFFIX)]
    existing = prefix + EVENTS + DLQ_SUFFIX
    # As the broker's auto-create (or an older `streams topics`) left it, with one override.
    await admin.create_topics(
        [NewTopic(existing, 4, 1, topic_configs={"max.message.bytes": "2000000"})]
    )
    try:
        before = await _configs(admin, [existing])
        assert int(before[existing]["retention.ms"]) <= DAY_MS  # the shared stack's default

        _topics_command(prefix)
        configs = await _configs(admin, names)
        assert {n: configs[n]["retention.ms"] for n in dlqs} == dict.fromkeys(dlqs, str(7 * DAY_MS))
        assert configs[existing]["max.message.bytes"] == "2000000"  # its override kept
        source = prefix + EVENTS
        assert int(configs[source]["retention.ms"]) == int(before[existing]["retention.ms"])

        # Configurable: the next run brings every DLQ to the new value.
        _topics_command(prefix, KAFKA_DLQ_RETENTION_HOURS="720")
        configs = await _configs(admin, dlqs)
        assert {n: configs[n]["retention.ms"] for n in dlqs} == dict.fromkeys(
            dlqs, str(30 * DAY_MS)
        )
    finally:
        await admin.delete_topics([n for n in [*names, existing] if n.startswith(prefix)])
