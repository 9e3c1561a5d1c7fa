"""The relay's partitioner puts every key where Kafka's default partitioner does."""

from __future__ import annotations

import random
import uuid

import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as aiokafka_murmur2

from streams.outbox.partitioner import kafka_partitioner, murmur2
from streams.outbox.producer import kafka_producer_factory


@pytest.mark.parametrize(
    ("key", "partition"),
    # Kafka's Java partitioner over 1,000 partitions (the vectors of kafka-python's tests).
    [(b"", 681), (b"a", 524), (b"ab", 434), (b"abc", 107), (b"123456789", 566), (b"\x00 ", 742)],
)
def test_java_client_vectors(key: bytes, partition: int) -> None:
    parts = list(range(1000))
    assert kafka_partitioner(key, parts, parts) == partition


def test_same_hash_as_aiokafka_for_every_length_and_byte() -> None:
    rnd = random.Random(20261206)
    keys = [bytes(rnd.getrandbits(8) for _ in range(n)) for n in range(600) for _ in range(5)]
    keys += [bytes([b]) * n for b in (0, 0x7F, 0x80, 0xFF) for n in range(1, 40)]
    keys += [str(uuid.UUID(int=rnd.getrandbits(128))).encode() for _ in range(2000)]
    keys += ["Москва:Hà Nội:事件".encode()]
    mismatched = [k for k in keys if murmur2(k) != aiokafka_murmur2(k)]
    assert mismatched == []


@pytest.mark.parametrize("count", [1, 2, 3, 6, 12, 64, 1000])
def test_same_partition_as_aiokafkas_default(count: int) -> None:
    rnd = random.Random(count)
    parts = list(range(count))
    available = parts[: max(1, count // 2)]  # a key keeps its partition while leaders are away
    default = DefaultPartitioner()
    for _ in range(2000):
        key = str(uuid.UUID(int=rnd.getrandbits(128))).encode()
        assert kafka_partitioner(key, parts, available) == default(key, parts, available)


def test_a_record_without_a_key_goes_to_an_available_partition() -> None:
    assert {kafka_partitioner(None, [0, 1, 2, 3], [2]) for _ in range(50)} == {2}
    assert kafka_partitioner(None, [5], []) == 5


async def test_the_relays_producers_use_it() -> None:
    producer = kafka_producer_factory("127.0.0.1:1")()  # not started: no connection
    try:
        assert producer._partitioner is kafka_partitioner  # type: ignore[attr-defined]
    finally:
        await producer.stop()
