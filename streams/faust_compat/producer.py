"""aiokafka's producer state and abort, which it has no public API for.

- ``AIOKafkaProducer._closed`` and ``_sender.sender_task``: whether a producer can still
  send (closed, or its background sender ended: a crashed sender fails every later send,
  a cancelled one leaves sends waiting forever). The outbox relay retires such a producer.
- ``_sender.close()``, ``_message_accumulator.fail_all()`` and ``client.close()``: stop a
  producer without delivering what it still holds (``stop()`` flushes first, and an
  idempotent producer retries a batch until it is acknowledged: rows the relay already
  sent again from a new producer would arrive twice).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.producer.message_accumulator import MessageAccumulator
from aiokafka.producer.sender import Sender

from streams.faust_compat.errors import (
    AIOKAFKA,
    FaustCompatError,
    assigned_in_init,
    attr,
    method,
    qualname,
)

PRODUCER = qualname(AIOKafkaProducer)
SENDER = qualname(Sender)


def producer_closed(producer: AIOKafkaProducer) -> bool:
    """True once the producer was stopped (or aborted): later sends fail at once."""
    return attr(producer, "_closed", AIOKAFKA, PRODUCER) is True


def sender_task(producer: AIOKafkaProducer) -> asyncio.Future[Any] | None:
    """The producer's background sender task; None before it started."""
    sender = attr(producer, "_sender", AIOKAFKA, PRODUCER)
    task = attr(sender, "sender_task", AIOKAFKA, SENDER)
    if task is not None and not isinstance(task, asyncio.Future):
        raise FaustCompatError(AIOKAFKA, f"{SENDER}.sender_task", f"is a {type(task).__name__}")
    return task


async def abort(producer: AIOKafkaProducer, error: Exception) -> None:
    """End the sender (it waits for the requests already on the wire, which only their
    broker can still write), fail every queued batch with ``error``, close the
    connections. Sends after this fail at once."""
    sender = attr(producer, "_sender", AIOKAFKA, PRODUCER)
    accumulator = attr(producer, "_message_accumulator", AIOKAFKA, PRODUCER)
    client = attr(producer, "client", AIOKAFKA, PRODUCER)
    attr(producer, "_closed", AIOKAFKA, PRODUCER)
    producer._closed = True
    await sender.close()
    accumulator.fail_all(error)
    await client.close()


def check() -> None:
    assigned_in_init(
        AIOKafkaProducer, ["_closed", "_sender", "_message_accumulator", "client"], AIOKAFKA
    )
    if not isinstance(vars(Sender).get("sender_task"), property):
        raise FaustCompatError(AIOKAFKA, f"{SENDER}.sender_task", "is no longer a property")
    method(Sender, "close", [], AIOKAFKA)
    method(MessageAccumulator, "fail_all", ["exception"], AIOKAFKA)
    # The cache's changelog batches (streams/tables/cache.py) are built and sent whole.
    method(AIOKafkaProducer, "create_batch", [], AIOKAFKA)
    method(AIOKafkaProducer, "send_batch", ["batch", "topic", "partition"], AIOKAFKA)
