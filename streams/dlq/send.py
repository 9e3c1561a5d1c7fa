"""Dead-letter publishing: the original key and value, the reason in headers, nothing lost.

A DLQ send must not become the next thing that stops a partition, so it degrades instead
of failing: a value too large for the producer is truncated (``dlq-value-truncated``,
``dlq-original-size``), a record with neither key nor value is sent with an empty value
and ``dlq-value-null`` (Kafka needs one of them), and an unreachable broker is retried
with backoff (the partition waits: nothing can be lost while Kafka is down). A record
that even then cannot be written is logged with its coordinates (it is still in the
input topic) and counted. A contract's secret fields (PayloadCipher) never reach the DLQ:
the value is written without them and ``dlq-redacted`` names them (streams/dlq/redact.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError
from faust.exceptions import ProducerSendError
from faust.types import EventT, TopicT

from streams import logs
from streams.dlq.redact import H_REDACTED, WITHHELD, redact
from streams.errors import SafeMessage

log = logging.getLogger("streams.dlq")

# What survives of a value too large to dead-letter whole: enough to see what it was.
TRUNCATED_VALUE_BYTES = 64 * 1024
REASON_MAX_CHARS = 1000
RETRY_FIRST_SECONDS = 0.2
RETRY_MAX_SECONDS = 10.0

Header = tuple[str, bytes]


class DeadLetterFailed(SafeMessage, Exception):
    """The record could not be written to the DLQ in any form."""


def dlq_headers(event: EventT[Any], reason: str, kind: str) -> list[Header]:
    msg = event.message
    return [
        ("dlq-reason", reason[:REASON_MAX_CHARS].encode("utf-8", "replace")),
        ("dlq-error-kind", kind.encode()),
        ("dlq-source-topic", msg.topic.encode()),
        ("dlq-source-partition", str(msg.partition).encode()),
        ("dlq-source-offset", str(msg.offset).encode()),
    ]


def _unwrap(exc: BaseException) -> BaseException:
    # faust wraps the producer's synchronous refusals (size checks) in ProducerSendError.
    if isinstance(exc, ProducerSendError) and exc.__cause__ is not None:
        return exc.__cause__
    return exc


def _retriable(exc: BaseException) -> bool:
    # KafkaTimeoutError (metadata or delivery timed out) is what an unreachable broker gives.
    return bool(getattr(exc, "retriable", False)) or isinstance(
        exc, KafkaTimeoutError | asyncio.TimeoutError | ConnectionError
    )


async def _send(dlq: TopicT, key: bytes | None, value: bytes | None, headers: list[Header]) -> None:
    fut = await dlq.send(key=key, value=value, headers=headers)
    await fut


async def send_to_dlq(
    dlq: TopicT,
    event: EventT[Any],
    reason: str,
    kind: str,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    max_value_bytes: int = TRUNCATED_VALUE_BYTES,
    secret_fields: Sequence[str] = (),
) -> str:
    """Publish the message to the DLQ and wait for Kafka's ack before the caller acks the input.

    Returns how it was written: "whole", "redacted", "truncated" or "null-value". Raises
    ``DeadLetterFailed`` only when Kafka refuses every form of the record.
    """
    msg = event.message
    key, value = msg.key, msg.value
    headers = dlq_headers(event, reason, kind)
    form = "whole"
    redacted = redact(value, secret_fields)
    if redacted.removed:
        headers.append((H_REDACTED, ",".join(redacted.removed).encode()))
        if redacted.removed == (WITHHELD,):
            headers.append(("dlq-original-size", str(len(value or b"")).encode()))
        value, form = redacted.value, "redacted"
    if key is None and value is None:
        value, form = b"", "null-value"
        headers.append(("dlq-value-null", b"true"))
    delay = RETRY_FIRST_SECONDS
    while True:
        try:
            await _send(dlq, key, value, headers)
            break
        except Exception as raised:
            exc = _unwrap(raised)
            if isinstance(exc, MessageSizeTooLargeError):
                if form == "truncated":
                    raise DeadLetterFailed("record too large even truncated") from exc
                size = len(value or b"")
                value = (value or b"")[:max_value_bytes]
                form = "truncated"
                headers += [
                    ("dlq-value-truncated", b"true"),
                    ("dlq-original-size", str(size).encode()),
                ]
                continue
            if not _retriable(exc):
                raise DeadLetterFailed(f"{type(exc).__name__}") from exc
            logs.event(
                log,
                logging.WARNING,
                "dlq_retry",
                topic=msg.topic,
                partition=msg.partition,
                offset=msg.offset,
                error=type(exc).__name__,
                delay_s=delay,
            )
            await sleep(delay)
            delay = min(delay * 2, RETRY_MAX_SECONDS)
    logs.event(
        log,
        logging.WARNING,
        "dlq",
        topic=msg.topic,
        partition=msg.partition,
        offset=msg.offset,
        kind=kind,
        form=form,
        reason=reason[:200],
    )
    return form
