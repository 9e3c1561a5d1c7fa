"""Create the contract topics, their DLQs and the slices' internal topics when missing (local
stack, demo, tests), and keep the DLQs' retention at KAFKA_DLQ_RETENTION_HOURS. A request the
broker refuses for want of an ACL raises ``AccessDenied`` naming the operation and topic."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import (
    KafkaConnectionError,
    NodeNotReadyError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    for_code,
)

from streams import logs
from streams.contracts import DLQ_SUFFIX
from streams.kafka_access import raise_denied
from streams.kafka_client import client_options, topic_config
from streams.settings import Settings

T = TypeVar("T")

log = logging.getLogger("streams.kafka_admin")

# DescribeConfigs' config_source of a value set on the topic itself.
_DYNAMIC_TOPIC_CONFIG = 1


def contract_topic_names(settings: Settings) -> list[str]:
    from streams.slices import catalogue

    names: list[str] = []
    for contract in catalogue():
        name = settings.topic(contract.name)
        names.append(name)
        if contract.direction == "in":
            names.append(name + DLQ_SUFFIX)
    return names


def internal_topic_names(settings: Settings) -> list[str]:
    """The slices' internal topics (each ``Slice.internal_topics``) and their DLQs."""
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
    settings: Settings,
    names: list[str] | None = None,
    *,
    timeout: float = 60.0,
    configs: dict[str, dict[str, str]] | None = None,
) -> list[str]:
    """Create whichever of ``names`` (default: every topic of the service) does not exist, and
    return once every partition of each has a leader.

    A consumer group that forms before its topics are in the broker's metadata gets no
    partitions and, with no later change, keeps none until its metadata refresh (minutes):
    so a worker started right after this call must find the topics ready.

    ``configs``: more topics to make, each with its topic-level configuration (Faust's table
    changelogs, ``faust_changelog_configs``).

    Every DLQ among ``names`` ends with ``retention.ms`` of KAFKA_DLQ_RETENTION_HOURS, one that
    had another too (made by the broker's auto-create, or before the setting changed).
    """
    configs = configs or {}
    wanted = (names if names is not None else service_topic_names(settings)) + list(configs)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        existing = set(await _retrying(admin.list_topics, deadline))
        missing = [n for n in wanted if n not in existing]
        if missing:
            rf = settings.kafka_replication_factor
            new = [
                NewTopic(
                    n,
                    settings.topic_partitions,
                    rf,
                    topic_configs={**topic_config(settings, n), **configs.get(n, {})},
                )
                for n in missing
            ]
            response = await _retrying(lambda: admin.create_topics(new), deadline)
            raise_denied(settings, ((e[0], e[1]) for e in response.topic_errors), "Create")
            await _leaders_elected(admin, missing, timeout, settings)
        # Every DLQ, the ones just created too: a topic made by someone else between the
        # listing and the create (an auto-create, a parallel run) has the broker's retention.
        dlqs = [n for n in wanted if n.endswith(DLQ_SUFFIX)]
        if dlqs:
            await _align_dlq_retention(admin, settings, dlqs, deadline)
        return missing
    finally:
        await admin.close()


async def _align_dlq_retention(
    admin: AIOKafkaAdminClient, settings: Settings, names: list[str], deadline: float
) -> list[str]:
    """Set ``retention.ms`` on the DLQs in ``names`` that have another value, and return once
    the broker reports it (it applies a change through its metadata log, so a describe
    right after the answer may still show the old value). Their other topic-level settings
    are kept: AlterConfigs replaces the whole set, so it is sent whole."""
    wanted = topic_config(settings, DLQ_SUFFIX)["retention.ms"]
    changed: set[str] = set()
    loop = asyncio.get_running_loop()
    pending = list(names)
    while True:
        changes = []
        unknown = []  # not described yet (a topic just made, a broker catching up): again
        for res in await _describe(admin, pending, deadline):
            entries: list[dict[str, Any]] = res["config_entries"]
            current = {e["config_names"]: e["config_value"] for e in entries}
            raise_denied(settings, [(res["resource_name"], res["error_code"])], "DescribeConfigs")
            if res["error_code"] != 0:
                unknown.append(res["resource_name"])
                continue
            if current.get("retention.ms") == wanted:
                continue
            own = [e for e in entries if e["config_source"] == _DYNAMIC_TOPIC_CONFIG]
            if any(e["is_sensitive"] for e in own):
                logs.event(
                    log,
                    logging.WARNING,
                    "dlq_retention_not_set",
                    topic=res["resource_name"],
                    reason="sensitive_topic_config",
                )
                continue
            configs = {e["config_names"]: e["config_value"] for e in own}
            configs["retention.ms"] = wanted
            changes.append(ConfigResource(ConfigResourceType.TOPIC, res["resource_name"], configs))
        if not changes and not unknown:
            return sorted(changed)
        if loop.time() > deadline:
            late = [c.name for c in changes] + unknown
            raise TimeoutError(f"retention.ms={wanted} not applied to {late}")
        if changes:
            # Sent again while the broker still reports the old value: the same change.
            for response in await _retrying(lambda c=changes: admin.alter_configs(c), deadline):  # type: ignore[misc]
                for res in response.to_object()["resources"]:
                    found = [(res["resource_name"], res["error_code"])]
                    raise_denied(settings, found, "AlterConfigs")
                    if res["error_code"] != 0:
                        raise for_code(res["error_code"])(
                            f"retention.ms of {res['resource_name']} not set"
                        )
        for c in changes:
            if c.name not in changed:
                logs.event(
                    log, logging.INFO, "dlq_retention_set", topic=c.name, retention_ms=wanted
                )
                changed.add(c.name)
        pending = [c.name for c in changes] + unknown
        await asyncio.sleep(0.2)


async def _describe(
    admin: AIOKafkaAdminClient, names: list[str], deadline: float
) -> list[dict[str, Any]]:
    resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in names]
    responses = await _retrying(lambda: admin.describe_configs(resources), deadline)
    return [res for r in responses for res in r.to_object()["resources"]]


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


async def _leaders_elected(
    admin: AIOKafkaAdminClient, names: list[str], timeout: float, settings: Settings
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pending = list(names)
    while True:
        described = await _retrying(lambda p=pending: admin.describe_topics(p), deadline)  # type: ignore[misc]
        raise_denied(settings, ((t["topic"], t["error_code"]) for t in described), "Describe")
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
