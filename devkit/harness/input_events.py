"""Stand-ins for the input loop's surroundings, on a test database: Faust's messages and
events, and a DLQ that records what was sent.

``Msg``/``Ev`` carry a value at an offset (the key is fixed); ``KeyedMsg``/``IndexedEv`` carry
the record's key and the index of the record they stand for (what the fuzz tests replay)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from streams.contracts import CALENDAR_EVENTS


@dataclass
class Msg:
    value: bytes | None
    offset: int
    key: bytes | None = b"k"
    topic: str = "pin.calendar.events.v1"
    partition: int = 0

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)


@dataclass
class Ev:
    message: Msg


@dataclass
class RecordingDlq:
    """Stands in for the DLQ topic: records what was sent and acknowledges at once (the e2e
    tier covers the real DLQ)."""

    sent: list[dict[str, Any]] = field(default_factory=list)

    async def send(self, **kwargs: Any) -> asyncio.Future[None]:
        self.sent.append(kwargs)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


@dataclass
class KeyedMsg:
    key: bytes | None
    value: bytes | None
    offset: int
    topic: str = CALENDAR_EVENTS.name
    partition: int = 0

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)


class IndexedEv:
    """Stands in for a Faust event: the message, and an index back to the record."""

    def __init__(self, index: int, message: KeyedMsg) -> None:
        self.index = index
        self.message = message

    def ack(self) -> None:  # the consumer's run loop acks; handle() never does
        raise AssertionError("handle() must not ack")
