"""Faust topic objects for the contract topics, made once per app and shared by the slices."""

from __future__ import annotations

from typing import Any

import faust
from faust.types import TopicT

from streams.contracts import DLQ_SUFFIX, TopicContract
from streams.faust_compat import RawBytes
from streams.settings import Settings

__all__ = ["RawBytes", "Topics"]


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
