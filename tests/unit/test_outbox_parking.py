"""Which refused outbox rows are parked, and what may be marked once they are: pure rules."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from aiokafka import errors as kafka_errors

from db.outbox import PendingRow
from streams.outbox.parking import ParkPolicy, Refusal, park_reason
from streams.outbox.producer import RECORD_ERRORS, TopicUnavailable
from streams.outbox.publish import Sent, publish


def test_every_record_error_has_a_park_reason_and_producer_errors_have_none() -> None:
    assert {park_reason(cls.__new__(cls)) for cls in RECORD_ERRORS} <= {
        "too_large",
        "unknown_topic",
        "unauthorized",
        "rejected",
    }
    assert all(park_reason(cls.__new__(cls)) is not None for cls in RECORD_ERRORS)
    assert park_reason(kafka_errors.KafkaTimeoutError()) is None
    assert park_reason(kafka_errors.NotLeaderForPartitionError()) is None
    assert park_reason(kafka_errors.OutOfOrderSequenceNumber()) is None


def test_too_large_is_parked_at_once_when_the_producer_refused_it_else_on_its_probe() -> None:
    policy = ParkPolicy(topic_wait=60)
    before_send = Refusal(1, kafka_errors.MessageSizeTooLargeError(), before_send=True)
    [park] = policy.decide([before_send], now=0.0, kafka_answered=False)
    assert (park.outbox_id, park.reason, park.error, park.refusals) == (
        1,
        "too_large",
        "MessageSizeTooLargeError",
        1,
    )
    by_broker = Refusal(2, kafka_errors.MessageSizeTooLargeError())
    assert policy.decide([by_broker], now=0.0, kafka_answered=True) == []
    assert [p.outbox_id for p in policy.decide([by_broker], now=0.3, kafka_answered=True)] == [2]


def test_an_unknown_topic_is_parked_after_the_wait_and_only_while_kafka_answers() -> None:
    policy = ParkPolicy(topic_wait=10)
    row = Refusal(7, TopicUnavailable("no metadata"))
    assert policy.decide([row], now=0.0, kafka_answered=True) == []
    assert policy.decide([row], now=9.9, kafka_answered=False) == []
    [park] = policy.decide([row], now=10.0, kafka_answered=False)
    assert (park.reason, park.refusals) == ("unknown_topic", 3)


def test_kafka_down_parks_no_unknown_topic_row() -> None:
    policy = ParkPolicy(topic_wait=10)
    policy.decide([], now=0.0, kafka_answered=True)  # Kafka answered, then went away
    row = Refusal(8, kafka_errors.TopicAuthorizationFailedError())
    for t in range(1, 100, 5):
        assert policy.decide([row], now=float(t), kafka_answered=False) == []
    assert [p.reason for p in policy.decide([row], now=200.0, kafka_answered=True)] == [
        "unauthorized"
    ]


def test_forgotten_rows_start_over() -> None:
    policy = ParkPolicy(topic_wait=60)
    row = Refusal(3, kafka_errors.RecordTooLargeError())
    assert policy.decide([row], now=0.0, kafka_answered=True) == []
    policy.forget([3])
    assert policy.decide([row], now=1.0, kafka_answered=True) == []


def _row(id: int, lane: int) -> PendingRow:
    return PendingRow(id, lane, "t", f"k{id}", "{}", {}, datetime(2026, 1, 1, tzinfo=UTC))


def test_rows_acknowledged_behind_a_parked_row_may_be_marked_but_not_behind_a_failed_one() -> None:
    rows = [_row(1, 0), _row(2, 0), _row(3, 0), _row(4, 0), _row(5, 1), _row(6, 1)]
    acked = [rows[1], rows[3], rows[5]]  # 2, 4 and 6; 1 refused, 3 failed, 5 refused
    sent = Sent(
        acked=[],
        placed={},
        failed_lanes={0, 1},
        refused_lanes={0, 1},
        producer_error=None,
        failed_ids={0: [1, 3], 1: [5]},
        candidates=acked,
    )
    assert sent.acked_without(set()) == []
    assert [r.id for r in sent.acked_without({1})] == [2]
    assert [r.id for r in sent.acked_without({1, 5})] == [2, 6]
    assert [r.id for r in sent.acked_without({1, 3, 5})] == [2, 4, 6]


def test_the_wait_is_the_topics_so_its_next_rows_are_parked_on_their_first_refusal() -> None:
    policy = ParkPolicy(topic_wait=10)
    first = Refusal(1, TopicUnavailable("no metadata"), "missing")
    assert policy.decide([first], now=0.0, kafka_answered=True) == []
    assert [p.outbox_id for p in policy.decide([first], now=10.0, kafka_answered=True)] == [1]
    policy.forget([1])
    # The next rows of the topic (other lanes, or behind the parked one) do not wait again.
    later = [
        Refusal(2, TopicUnavailable("x"), "missing"),
        Refusal(3, TopicUnavailable("x"), "other"),
    ]
    assert [p.outbox_id for p in policy.decide(later, now=10.5, kafka_answered=True)] == [2]
    # A row of the topic goes through (it was created): its next refusal waits again.
    policy.decide([], now=11.0, kafka_answered=True, acked_topics={"missing"})
    again = Refusal(4, TopicUnavailable("x"), "missing")
    assert policy.decide([again], now=12.0, kafka_answered=True) == []


class _CountingProducer:
    """Metadata for every topic but ``missing`` (which never answers); sends succeed."""

    def __init__(self) -> None:
        self.lookups: list[str] = []

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def partitions_for(self, topic: str) -> set[int]:
        self.lookups.append(topic)
        if topic == "missing":
            await asyncio.Event().wait()
        return {0}

    async def send(self, topic: str, value: bytes | None = None, **_: object) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(SimpleNamespace(partition=0, offset=len(self.lookups)))
        return future


async def test_a_topic_known_to_be_unavailable_is_refused_without_another_lookup() -> None:
    """A pass with a row of a missing topic waits the metadata bound once; the next passes
    are told the topic is unavailable and refuse its rows at once."""
    producer = _CountingProducer()
    rows = [
        PendingRow(1, 0, "missing", "k1", "{}", {}, datetime(2026, 1, 1, tzinfo=UTC)),
        PendingRow(2, 1, "good", "k2", "{}", {}, datetime(2026, 1, 1, tzinfo=UTC)),
    ]
    first = await publish(producer, rows, metadata_bound=0.05, relay="t")
    assert sorted(producer.lookups) == ["good", "missing"]
    assert set(first.looked_up_unavailable) == {"missing"}
    producer.lookups.clear()
    started = time.monotonic()
    again = await publish(
        producer,
        rows,
        metadata_bound=30,
        relay="t",
        known_unavailable=first.looked_up_unavailable,
    )
    assert time.monotonic() - started < 5, "no wait for the missing topic's metadata"
    assert producer.lookups == ["good"]
    assert [r.id for r in again.acked] == [2]
    assert again.refusals[0].outbox_id == 1 and again.refusals[0].topic == "missing"
    assert again.looked_up_unavailable == {}
