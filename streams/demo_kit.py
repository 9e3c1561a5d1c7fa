"""Plain Kafka helpers for ``make demo`` (a producer and two readers, as another team's
client would use the topics)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer


class DemoKafka:
    def __init__(self, bootstrap: str, options: dict[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self.options = options or {}

    async def send(self, topic: str, records: Sequence[tuple[str, bytes]]) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", **self.options)
        await producer.start()
        try:
            for key, value in records:
                await producer.send(topic, value, key=key.encode())
            await producer.flush()
        finally:
            await producer.stop()

    async def collect(
        self,
        topic: str,
        wanted: Callable[[dict[str, Any]], bool],
        *,
        key: Callable[[dict[str, Any]], str],
        count: int,
        timeout: float,
    ) -> dict[str, dict[str, Any]]:
        """JSON records of ``topic`` that ``wanted`` accepts, by ``key`` (re-publishes of one
        record collapse), until ``count`` distinct keys arrived or ``timeout`` passed."""
        seen: dict[str, dict[str, Any]] = {}
        consumer = self._consumer(topic)
        await consumer.start()
        try:
            deadline = time.monotonic() + timeout
            while len(seen) < count and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for r in records:
                        body = json.loads(r.value) if r.value else {}
                        if wanted(body):
                            seen[key(body)] = body
        finally:
            await consumer.stop()
        return seen

    async def count_keys(self, topic: str, keys: set[str], timeout: float) -> int:
        """Records of ``topic`` whose key is in ``keys``, read for ``timeout`` seconds."""
        consumer = self._consumer(topic)
        await consumer.start()
        n = 0
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    n += sum(1 for r in records if r.key and r.key.decode() in keys)
        finally:
            await consumer.stop()
        return n

    def _consumer(self, topic: str) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            topic,
            bootstrap_servers=self.bootstrap,
            **self.options,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
