"""Create the contract topics, their DLQs and the slices' internal topics when missing (local
stack, demo, tests)."""

from __future__ import annotations

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams.contracts import ALL_TOPICS, DLQ_SUFFIX
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


async def ensure_topics(settings: Settings, names: list[str] | None = None) -> list[str]:
    """Create whichever of ``names`` (default: every topic of the service) does not exist."""
    wanted = names if names is not None else service_topic_names(settings)
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [n for n in wanted if n not in existing]
        if missing:
            await admin.create_topics([NewTopic(n, settings.topic_partitions, 1) for n in missing])
        return missing
    finally:
        await admin.close()
