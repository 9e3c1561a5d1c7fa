"""Faust topic objects for the contract topics, made once per app and shared by the slices."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import faust
from faust.types import AppT, EventT, TopicT
from faust.types.tuples import Message

from streams.contracts import DLQ_SUFFIX, TopicContract
from streams.settings import Settings


class RawBytes(faust.Schema[bytes | None, bytes | None]):
    """Keys and values exactly as the broker holds them (bytes, or None for a tombstone):
    what Faust's schema with ``key_type=bytes`` and the "raw" codec returns too, but without
    its serializer registry twice for every record of every input."""

    def compile(self, app: AppT, **_: Any) -> Callable[..., Awaitable[EventT[Any]]]:
        create_event = app.create_event

        async def decode(message: Message, *, propagate: bool = False) -> EventT[Any]:
            return create_event(message.key, message.value, message.headers, message)

        return decode


class Topics:
    """Inputs and their DLQs are raw bytes: decoding is ours, so that a bad message can go to
    the DLQ with its reason instead of being dropped by a codec."""

    def __init__(self, app: faust.App, settings: Settings) -> None:
        self._app = app
        self._settings = settings
        self._made: dict[str, TopicT] = {}

    def name(self, contract: TopicContract[Any]) -> str:
        return self._settings.topic(contract.name)

    def input(self, contract: TopicContract[Any]) -> TopicT:
        return self._raw(self.name(contract), internal=contract.direction == "internal")

    def dlq_of(self, contract: TopicContract[Any]) -> TopicT:
        return self._raw(self.name(contract) + DLQ_SUFFIX)

    def _raw(self, name: str, *, internal: bool = False) -> TopicT:
        topic = self._made.get(name)
        if topic is None:
            # An internal topic (a slice's own, e.g. per-owner work items) is created by the
            # worker that subscribes to it, with the service's partition count.
            topic = self._made[name] = self._app.topic(
                name,
                schema=RawBytes(
                    key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
                ),
                partitions=self._settings.topic_partitions,
                internal=internal,
            )
        return topic
