"""Every Kafka topic the worker touches, declared once (names from the contract package)."""

from __future__ import annotations

from typing import Any

import faust
from faust.types import TopicT

from streams.contracts import CALENDAR_EVENTS, DLQ_SUFFIX, TopicContract
from streams.settings import Settings


class Topics:
    """Faust topic objects for one app. Inputs are read as raw bytes: decoding is ours,
    so that a bad message can go to the DLQ with its reason instead of being dropped."""

    def __init__(self, app: faust.App, settings: Settings) -> None:
        self._app = app
        self._settings = settings
        self.calendar_events = self.input(CALENDAR_EVENTS)
        self.calendar_events_dlq = self.dlq_of(CALENDAR_EVENTS)

    def name(self, contract: TopicContract[Any]) -> str:
        return self._settings.topic(contract.name)

    def input(self, contract: TopicContract[Any]) -> TopicT:
        return self._app.topic(
            self._settings.topic(contract.name),
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=self._settings.topic_partitions,
        )

    def dlq_of(self, contract: TopicContract[Any]) -> TopicT:
        return self._app.topic(
            self._settings.topic(contract.name) + DLQ_SUFFIX,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=self._settings.topic_partitions,
        )
