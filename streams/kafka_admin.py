"""Create the contract topics, their DLQs and the slices' internal topics when missing (local
stack, demo, tests)."""

from __future__ import annotations

import asyncio

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams.contracts import ALL_TOPICS, DLQ_SUFFIX
from streams.kafka_client import client_options, topic_config
from streams.settings import Settings


def contract_topic_names(settings: Settings) -> list[str]:
    names: list[str] = []
    for contract in ALL_TOPICS:
        name = settings.topic(contract.name)
        names.append(name)
        if contract.direction == "in":
            names.append(name + DLQ_SUFFIX)
    return names


def internal_topic_names(settings: Settings) -> list[str]:
    """The slices' internal topics (streams/slices/*: ``INTERNAL_TOPICS``) and their DLQs."""
    from streams.slices import internal_topics

    names: list[str] = []
    for contract in internal_topics():
        name = settings.topic(contract.name)
        names.extend([name, name + DLQ_SUFFIX])
    return names


def service_topic_names(settings: Settings) -> list[str]:
    """Every topic the service reads or writes: contract topics, DLQs, internal topics."""
    return contract_topic_names(settings) + internal_topic_names(settings)


async def ensure_topics(
    settings: Settings, names: list[str] | None = None, *, timeout: float = 60.0
) -> list[str]:
    """Create whichever of ``names`` (default: every topic of the service) does not exist, and
    return once every partition of each has a leader.

    A consumer group that forms before its topics are in the broker's metadata gets no
    partitions and, with no later change, keeps none until its metadata refresh (minutes):
    so a worker started right after this call must find the topics ready.
    """
    wanted = names if names is not None else service_topic_names(settings)
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [n for n in wanted if n not in existing]
        if missing:
            rf, config = settings.kafka_replication_factor, topic_config(settings)
            await admin.create_topics(
                [NewTopic(n, settings.topic_partitions, rf, topic_configs=config) for n in missing]
            )
            await _leaders_elected(admin, missing, timeout)
        return missing
    finally:
        await admin.close()


async def _leaders_elected(admin: AIOKafkaAdminClient, names: list[str], timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pending = list(names)
    while True:
        described = await admin.describe_topics(pending)
        pending = [
            t["topic"]
            for t in described
            if t["error_code"] != 0
            or not t["partitions"]
            or any(p["leader"] < 0 or p["error_code"] != 0 for p in t["partitions"])
        ]
        if not pending:
            return
        if loop.time() > deadline:
            raise TimeoutError(f"topics without a leader after {timeout:.0f}s: {pending}")
        await asyncio.sleep(0.1)
