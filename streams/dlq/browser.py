"""The console's DLQ browser: one admin client and one consumer per worker, started on the
first browse and kept (a browse logs in to Kafka under the service's own principal: never
once per request), and one browse at a time: a browse asked while one runs is refused at once
(``Busy``: the page answers 503 with Retry-After), it never piles up logins or waits."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient

from streams.dlq.browse import WINDOW, Browse, read_back
from streams.dlq.replay import topic_layout
from streams.dlq.rules import ReplayUsageError, resolve_topic
from streams.kafka_client import client_options
from streams.settings import Settings


class Busy(Exception):
    """Another browse is running on this worker."""


class DlqBrowser:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = asyncio.Lock()
        self._admin: AIOKafkaAdminClient | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self.started = 0
        """Clients started so far (two on the first browse; again only after a failure)."""

    async def browse(
        self, topic: str, *, reason: str | None = None, limit: int | None = None
    ) -> Browse:
        """``streams.dlq.browse.browse`` on the kept clients; Busy while another runs."""
        if self._lock.locked():
            raise Busy("a dead-letter browse is running on this worker: try again shortly")
        async with self._lock:
            _, dlq = resolve_topic(self.settings, topic)
            try:
                admin, consumer = await self._clients()
                _, partitions = await topic_layout(admin, self.settings, dlq)
                return await read_back(
                    self.settings, consumer, topic, partitions, reason, limit, WINDOW
                )
            except ReplayUsageError:
                raise  # an unknown topic: the clients are fine
            except BaseException:
                await self.close()  # a client in an unknown state is not kept
                raise

    async def _clients(self) -> tuple[AIOKafkaAdminClient, AIOKafkaConsumer]:
        if self._admin is None:
            admin = AIOKafkaAdminClient(**client_options(self.settings))
            await admin.start()
            self._admin = admin
            self.started += 1
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                **client_options(self.settings),
                enable_auto_commit=False,
                isolation_level="read_committed",
            )
            await consumer.start()
            self._consumer = consumer
            self.started += 1
        return self._admin, self._consumer

    async def close(self) -> None:
        admin, consumer, self._admin, self._consumer = self._admin, self._consumer, None, None
        if consumer is not None:
            await consumer.stop()
        if admin is not None:
            await admin.close()
