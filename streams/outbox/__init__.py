"""Transactional outbox: records written with state changes, the relay that publishes them.

Retention of published rows is a maintenance job: streams.maintenance.outbox_retention.
"""

from __future__ import annotations

from streams.outbox.config import RelayConfig, RelayResult
from streams.outbox.producer import Producer, ProducerFactory, kafka_producer_factory
from streams.outbox.records import (
    OUTBOX_ID_HEADER,
    OutboxRecord,
    insert_many,
    outbox_id_of,
    record_for,
    wire_headers,
)
from streams.outbox.relay import OutboxRelay

__all__ = [
    "OUTBOX_ID_HEADER",
    "OutboxRecord",
    "OutboxRelay",
    "Producer",
    "ProducerFactory",
    "RelayConfig",
    "RelayResult",
    "insert_many",
    "kafka_producer_factory",
    "outbox_id_of",
    "record_for",
    "wire_headers",
]
