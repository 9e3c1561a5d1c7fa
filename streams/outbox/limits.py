"""The relay producer's record limit against the topics': checked when a relay starts."""

from __future__ import annotations

import logging

from streams import logs
from streams.asynctools import describe
from streams.contracts import produced_contracts
from streams.settings import Settings

log = logging.getLogger("streams.outbox.relay")


async def topics_below_limit(settings: Settings, max_record_bytes: int) -> list[tuple[str, int]]:
    """The produced topics whose ``max.message.bytes`` is below OUTBOX_MAX_RECORD_BYTES, each
    logged: a record between the two passes the producer and is refused by the broker (and
    parked). Kafka unreachable: logged, nothing found (the relay does not wait for it)."""
    from streams.kafka_admin import topic_max_message_bytes

    names = [settings.topic(c.name) for c in produced_contracts()]
    try:
        limits = await topic_max_message_bytes(settings, names)
    except Exception as exc:
        logs.event(log, logging.WARNING, "outbox_topic_limits_unchecked", error=describe(exc))
        return []
    below = [
        (name, limits[name])
        for name in names
        if limits.get(name, max_record_bytes) < max_record_bytes
    ]
    for name, limit in below:
        logs.event(
            log,
            logging.ERROR,
            "outbox_topic_limit_below_producer",
            topic=name,
            max_message_bytes=limit,
            outbox_max_record_bytes=max_record_bytes,
        )
    return below
