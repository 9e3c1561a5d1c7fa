"""Dead-letter publishing: the original key and value, the reason in headers, nothing lost."""

from __future__ import annotations

import logging
from typing import Any

from faust.types import EventT, TopicT

log = logging.getLogger("streams.dlq")


def dlq_headers(event: EventT[Any], reason: str, kind: str) -> list[tuple[str, bytes]]:
    msg = event.message
    return [
        ("dlq-reason", reason.encode()),
        ("dlq-error-kind", kind.encode()),
        ("dlq-source-topic", msg.topic.encode()),
        ("dlq-source-partition", str(msg.partition).encode()),
        ("dlq-source-offset", str(msg.offset).encode()),
    ]


async def send_to_dlq(dlq: TopicT, event: EventT[Any], reason: str, kind: str) -> None:
    """Publish the message to the DLQ and wait for Kafka's ack before the caller acks the input."""
    msg = event.message
    fut = await dlq.send(key=msg.key, value=msg.value, headers=dlq_headers(event, reason, kind))
    await fut
    log.warning(
        "action=dlq topic=%s partition=%s offset=%s kind=%s reason=%r",
        msg.topic,
        msg.partition,
        msg.offset,
        kind,
        reason,
    )
