"""Create the contract topics, their DLQs and the slices' internal topics when missing (local
stack, demo, tests)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    KafkaConnectionError,
    NodeNotReadyError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
)

from streams.contracts import ALL_TOPICS, DLQ_SUFFIX
from streams.kafka_client import client_options, topic_config
from streams.settings import Settings

T = TypeVar("T")


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
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        existing = set(await _retrying(admin.list_topics, deadline))
        missing = [n for n in wanted if n not in existing]
        if missing:
            rf, config = settings.kafka_replication_factor, topic_config(settings)
            new = [
                NewTopic(n, settings.topic_partitions, rf, topic_configs=config) for n in missing
            ]
            await _retrying(lambda: admin.create_topics(new), deadline)
            await _leaders_elected(admin, missing, timeout)
        return missing
    finally:
        await admin.close()


async def _retrying(call: Callable[[], Awaitable[T]], deadline: float) -> T:
    """``call()`` again while it fails for a node that is gone: the admin client sends each
    request to a random broker of its metadata, which lists a broker that just died until
    the cluster fences it (seconds), so one dead broker of three must not fail the call."""
    loop = asyncio.get_running_loop()
    delay = 0.1
    while True:
        try:
            return await call()
        except TopicAlreadyExistsError:
            raise
        except (NodeNotReadyError, KafkaConnectionError, RequestTimedOutError):
            if loop.time() + delay > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def _leaders_elected(admin: AIOKafkaAdminClient, names: list[str], timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pending = list(names)
    while True:
        described = await _retrying(lambda p=pending: admin.describe_topics(p), deadline)  # type: ignore[misc]
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


async def topic_max_message_bytes(
    settings: Settings, names: list[str], *, timeout: float = 10.0
) -> dict[str, int]:
    """``max.message.bytes`` of each of ``names`` that exists (the broker's default when the
    topic sets none); a topic Kafka does not know is left out."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    admin = AIOKafkaAdminClient(**client_options(settings))
    await asyncio.wait_for(admin.start(), timeout)
    try:
        resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in names]
        responses = await asyncio.wait_for(admin.describe_configs(resources), timeout)
    finally:
        await admin.close()
    limits: dict[str, int] = {}
    for response in responses:
        # (error_code, error_message, resource_type, resource_name, config_entries)
        for resource in response.resources:
            error_code, name, entries = resource[0], resource[3], resource[4]
            if error_code:
                continue
            for entry in entries:
                if entry[0] == "max.message.bytes" and entry[1] is not None:
                    limits[str(name)] = int(entry[1])
    return limits
