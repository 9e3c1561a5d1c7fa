"""What the service reads from Faust's consumer that Faust keeps private.

- ``Consumer._committed_offset``: the committed offset per partition, as Faust last set it
  (at the assignment's seek, then at every commit). Lag and stall detection (/status,
  /health) and the gap healer's first expectation (streams/input/gaps.py) read it; Faust
  has no public view of it, and asking the broker per partition on every page would not
  be the same figure (Faust's is what it will commit from).
- ``Consumer._to_message`` of the aiokafka driver: a record the gap healer read itself,
  turned into the Faust message whose ack feeds Faust's commit bookkeeping.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka

from streams.faust_compat.errors import FAUST, FaustCompatError, annotated, attr, method

COMMITTED = "_committed_offset"
TO_MESSAGE = "_to_message"


def committed_offsets(consumer: object) -> Mapping[Any, int | None]:
    """The consumer's committed offset per partition (None: nothing committed yet)."""
    found = attr(consumer, COMMITTED, FAUST, "Consumer")
    if not isinstance(found, Mapping):
        raise FaustCompatError(FAUST, f"Consumer.{COMMITTED}", f"is a {type(found).__name__}")
    return found


def to_message(consumer: object, tp: Any, record: Any) -> Any:
    """``record`` (aiokafka's ConsumerRecord of ``tp``) as the Faust message the consumer
    would have made of it."""
    message = attr(consumer, TO_MESSAGE, FAUST, "Consumer")(tp, record)
    if message is None:  # the base class's abstract stub: the driver no longer defines it
        raise FaustCompatError(FAUST, f"Consumer.{TO_MESSAGE}", "returned no message")
    return message


def check() -> None:
    annotated(faust_consumer.Consumer, COMMITTED, FAUST)
    method(faust_aiokafka.Consumer, TO_MESSAGE, ["tp", "record"], FAUST, own=True)
