"""Pure parts of "no input can stop a partition": stall detection, DLQ degradation, error meaning."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest
from aiokafka.errors import (
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    TopicAuthorizationFailedError,
)
from faust.exceptions import ProducerSendError

from db.connector import DatabaseUnavailable, InputRejected, classify, translate
from streams.dlq.send import DeadLetterFailed, send_to_dlq
from streams.input.progress import PartitionProgress, ReasonCounts


@dataclass
class Msg:
    tp: str
    offset: int
    key: bytes | None = b"k"
    value: bytes | None = b"v"
    topic: str = "in"
    partition: int = 0


@dataclass
class Ev:
    message: Msg


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_partition_with_lag_that_does_not_move_is_a_stall_after_the_limit() -> None:
    clock = Clock()
    p = PartitionProgress(clock)
    assert p.check("a", highwater=10, committed=4, limit_seconds=60) is None  # clock starts
    clock.t += 59
    assert p.check("a", highwater=10, committed=4, limit_seconds=60) is None
    clock.t += 2
    stall = p.check("a", highwater=10, committed=4, limit_seconds=60)
    assert stall is not None and stall.lag == 6 and stall.seconds == 61
    # Progress clears it; a moving partition with lag is not a stall.
    p.advanced([Ev(Msg("a", 5))])
    assert p.check("a", highwater=10, committed=4, limit_seconds=60) is None
    assert p.position("a") == 6


def test_no_lag_is_never_a_stall_and_restarts_the_clock() -> None:
    clock = Clock()
    p = PartitionProgress(clock)
    p.advanced([Ev(Msg("a", 9))])
    clock.t += 500
    assert p.check("a", highwater=10, committed=None, limit_seconds=60) is None
    clock.t += 30  # a new message arrives now: waiting starts from the last check without lag
    assert p.check("a", highwater=11, committed=None, limit_seconds=60) is None
    clock.t += 31
    assert p.check("a", highwater=11, committed=None, limit_seconds=60) is not None


def test_forget_drops_unassigned_partitions() -> None:
    p = PartitionProgress(Clock())
    p.advanced([Ev(Msg("a", 1)), Ev(Msg("b", 2))])
    p.forget(["b"])
    assert p.position("a") is None and p.position("b") == 3


def test_a_partition_handed_back_after_a_rebalance_starts_from_its_committed_offset() -> None:
    """The fault matrix's stall (CI: ``source-events.v1:1 lag=3 for=385s``): this worker
    handled the partition up to 5, a rebalance gave it to another worker, which handled 5..7
    and committed 8, and a later rebalance gave it back. No record comes after that, so
    nothing here advances it: the position must come from the committed offset, not from
    what this worker handled before it lost the partition."""
    clock = Clock()
    p = PartitionProgress(clock)
    p.advanced([Ev(Msg("a", 4))])
    # Handed back between two checks (nobody asked /health meanwhile).
    clock.t += 500
    assert p.check("a", highwater=8, committed=8, limit_seconds=60) is None
    clock.t += 500
    assert p.check("a", highwater=8, committed=8, limit_seconds=60) is None
    assert p.position("a") == 8
    # Lag behind the committed offset still counts, from when the position last moved.
    clock.t += 10
    assert p.check("a", highwater=9, committed=8, limit_seconds=60) is None
    clock.t += 61
    stall = p.check("a", highwater=9, committed=8, limit_seconds=60)
    assert stall is not None and stall.lag == 1


def test_a_revoked_partition_keeps_no_position() -> None:
    p = PartitionProgress(Clock())
    p.advanced([Ev(Msg("a", 4)), Ev(Msg("b", 2))])
    p.revoked(["a"])
    assert p.position("a") is None and p.position("b") == 3


def test_reason_counts_are_bounded() -> None:
    r = ReasonCounts(max_reasons=2)
    for reason in ["x", "y", "z", "x", "w"]:
        r.add("schema", reason)
    snap = r.snapshot()
    assert snap["by_kind"] == {"schema": 5}
    assert {(t["reason"], t["count"]) for t in snap["top_reasons"]} == {
        ("x", 2),
        ("y", 1),
        ("other", 2),
    }


def _pg(sqlstate: str) -> asyncpg.PostgresError:
    cls = asyncpg.PostgresError.get_message_class_for_sqlstate(sqlstate)  # type: ignore[attr-defined]
    return cls(f"boom {sqlstate}")


@pytest.mark.parametrize(
    ("sqlstate", "meaning"),
    [
        ("53100", "unavailable"),  # disk full
        ("53200", "unavailable"),  # out of memory
        ("25006", "unavailable"),  # read-only transaction (failover)
        ("55P03", "unavailable"),  # lock not available
        ("42P01", "unavailable"),  # undefined table
        ("42501", "unavailable"),  # insufficient privilege
        ("57P01", "unavailable"),  # admin shutdown
        ("40001", "unavailable"),  # serialization failure
        ("XX000", "unavailable"),  # internal error
        ("P0001", "unavailable"),  # a trigger's plain RAISE: unknown, so block, never lose
        ("22P02", "rejected"),  # invalid text representation
        ("22021", "rejected"),  # NUL in text
        ("23505", "rejected"),  # unique violation
        ("23514", "rejected"),  # check violation
        ("54000", "rejected"),  # program limit (index row too large)
    ],
)
def test_database_errors_are_classified_by_what_they_mean(sqlstate: str, meaning: str) -> None:
    exc = _pg(sqlstate)
    assert classify(exc) == meaning
    translated = translate(exc)
    expected = DatabaseUnavailable if meaning == "unavailable" else InputRejected
    assert isinstance(translated, expected) and translated.sqlstate == sqlstate


def test_only_network_os_errors_mean_the_database_is_unavailable() -> None:
    assert classify(ConnectionRefusedError()) == "unavailable"
    assert classify(OSError(101, "Network is unreachable")) == "unavailable"
    assert classify(TimeoutError()) == "unavailable"
    assert classify(IsADirectoryError("America")) is None
    assert classify(ValueError("x")) is None
    assert classify(asyncpg.exceptions.DataError("bad parameter")) == "rejected"


@dataclass
class FakeDlq:
    """Stands in for the Kafka DLQ topic: refuses sends as scripted, records what it took."""

    refuse: list[BaseException] = field(default_factory=list)
    sent: list[dict[str, Any]] = field(default_factory=list)

    async def send(self, **kwargs: Any) -> asyncio.Future[None]:
        if self.refuse:
            raise self.refuse.pop(0)
        self.sent.append(kwargs)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


async def _no_sleep(_: float) -> None:
    return None


def _headers(sent: dict[str, Any]) -> dict[str, bytes]:
    return dict(sent["headers"])


async def test_a_value_too_large_for_the_dlq_is_truncated_with_headers_saying_so() -> None:
    too_large = ProducerSendError("too large")
    too_large.__cause__ = MessageSizeTooLargeError()
    dlq = FakeDlq(refuse=[too_large])
    ev = Ev(Msg("in:0", 7, value=b"x" * 200_000))
    form = await send_to_dlq(dlq, ev, "bad", "schema", sleep=_no_sleep)  # type: ignore[arg-type]
    assert form == "truncated"
    [sent] = dlq.sent
    assert sent["value"] == b"x" * 64 * 1024 and sent["key"] == b"k"
    h = _headers(sent)
    assert h["dlq-value-truncated"] == b"true" and h["dlq-original-size"] == b"200000"
    assert h["dlq-reason"] == b"bad" and h["dlq-source-offset"] == b"7"


async def test_a_record_with_neither_key_nor_value_is_dead_lettered_with_a_marker() -> None:
    dlq = FakeDlq()
    form = await send_to_dlq(dlq, Ev(Msg("in:0", 1, key=None, value=None)), "tombstone", "json")  # type: ignore[arg-type]
    assert form == "null-value"
    [sent] = dlq.sent
    assert sent["key"] is None and sent["value"] == b""
    assert _headers(sent)["dlq-value-null"] == b"true"


async def test_an_unreachable_broker_is_retried_and_a_refusal_is_reported() -> None:
    dlq = FakeDlq(refuse=[KafkaTimeoutError(), KafkaTimeoutError()])
    delays: list[float] = []

    async def sleep(d: float) -> None:
        delays.append(d)

    assert await send_to_dlq(dlq, Ev(Msg("in:0", 1)), "r", "schema", sleep=sleep) == "whole"  # type: ignore[arg-type]
    assert len(dlq.sent) == 1 and delays == [0.2, 0.4]
    refused = FakeDlq(refuse=[TopicAuthorizationFailedError()])
    with pytest.raises(DeadLetterFailed):
        await send_to_dlq(refused, Ev(Msg("in:0", 1)), "r", "schema", sleep=sleep)  # type: ignore[arg-type]
