"""Pure rules of the outbox relay: which Kafka errors stop a lane and which replace the
producer, when a producer counts as unusable, and the relay's configuration checks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka import errors as kafka_errors

from streams.outbox.config import DEFAULT_MAX_LANES_PER_PASS, RelayConfig
from streams.outbox.producer import TopicUnavailable, is_record_error, producer_fault
from streams.outbox.publish import InDoubt, Sent, publish_waiting
from streams.settings import ConfigError, Settings, load_settings


@pytest.mark.parametrize(
    "exc",
    [
        kafka_errors.MessageSizeTooLargeError(),
        kafka_errors.RecordTooLargeError(),
        kafka_errors.UnknownTopicOrPartitionError(),
        kafka_errors.TopicAuthorizationFailedError("t"),
        kafka_errors.InvalidTopicError(),
        TopicUnavailable("no metadata"),
        ValueError("cannot serialize"),  # not Kafka's: about the record
    ],
)
def test_errors_about_one_record_hold_back_its_lane_only(exc: BaseException) -> None:
    assert is_record_error(exc)


@pytest.mark.parametrize(
    "exc",
    [
        kafka_errors.OutOfOrderSequenceNumber(),
        kafka_errors.ProducerFenced(),
        kafka_errors.InvalidProducerEpoch(),
        kafka_errors.UnknownProducerId(),
        kafka_errors.ProducerClosed(),
        kafka_errors.KafkaTimeoutError(),
        kafka_errors.KafkaError("Unexpected error during batch delivery"),
        kafka_errors.ClusterAuthorizationFailedError(),
        asyncio.CancelledError(),
    ],
)
def test_errors_about_the_producer_replace_it(exc: BaseException) -> None:
    assert not is_record_error(exc)


async def test_producer_fault_reads_closed_and_sender_state() -> None:
    # A real aiokafka producer, never started (no broker needed), its state set by hand.
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9")
    loop = asyncio.get_running_loop()
    running: asyncio.Future[None] = loop.create_future()
    ended: asyncio.Future[None] = loop.create_future()
    ended.set_result(None)
    state: Any = producer
    sender = state._sender
    try:
        assert producer_fault(producer) is None  # not started yet: no sender task
        sender._sender_task = running
        assert producer_fault(producer) is None
        sender._sender_task = ended
        assert producer_fault(producer) == "sender_stopped"
        sender._sender_task = running
        state._closed = True
        assert producer_fault(producer) == "closed"
    finally:
        sender._sender_task = None
        state._closed = False
        await producer.stop()
        running.cancel()
    assert producer_fault(object()) is None  # not aiokafka: no state to read


def test_lanes_per_pass_are_bounded_by_default() -> None:
    assert RelayConfig().max_lanes_per_pass == DEFAULT_MAX_LANES_PER_PASS == 16
    assert Settings().outbox_max_lanes_per_pass == 16
    assert RelayConfig.from_settings(Settings()).max_lanes_per_pass == 16
    assert RelayConfig.from_settings(Settings()).publish_timeout == 10.0


@pytest.mark.parametrize(
    "kwargs", [{"publish_timeout": 0}, {"publish_timeout": -1}, {"producer_stop_timeout": 0}]
)
def test_relay_config_rejects_bad_timeouts(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="RelayConfig"):
        RelayConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OUTBOX_PUBLISH_TIMEOUT_SECONDS", "0"),
        ("OUTBOX_MAX_LANES_PER_PASS", "0"),
        ("OUTBOX_MAX_LANES_PER_PASS", "65"),
    ],
)
def test_bad_relay_settings_stop_startup_with_their_name(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        load_settings()


def test_publish_timeout_must_stay_well_below_the_idle_in_transaction_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OUTBOX_PUBLISH_TIMEOUT_SECONDS", "31")
    monkeypatch.setenv("DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", "60")
    settings = load_settings()
    with pytest.raises(ConfigError) as caught:
        RelayConfig.from_settings(settings)
    assert "OUTBOX_PUBLISH_TIMEOUT_SECONDS" in str(caught.value)
    assert "DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS" in str(caught.value)

    monkeypatch.setenv("OUTBOX_PUBLISH_TIMEOUT_SECONDS", "30")
    assert RelayConfig.from_settings(load_settings()).publish_timeout == 30


def test_in_doubt_timeout_defaults_and_may_not_undercut_the_publish_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert RelayConfig.from_settings(Settings()).in_doubt_timeout == 120.0
    with pytest.raises(ValueError, match="in_doubt_timeout"):
        RelayConfig(publish_timeout=10, in_doubt_timeout=5)
    monkeypatch.setenv("OUTBOX_IN_DOUBT_TIMEOUT_SECONDS", "5")
    with pytest.raises(ConfigError) as caught:
        RelayConfig.from_settings(load_settings())
    assert "OUTBOX_IN_DOUBT_TIMEOUT_SECONDS" in str(caught.value)


def _sent() -> Sent:
    return Sent(acked=[], placed={}, failed_lanes=set(), refused_lanes=set(), producer_error=None)


async def test_a_pass_keeps_waiting_for_sends_in_doubt_and_keeps_its_session() -> None:
    acknowledged = asyncio.Event()
    keepalives: list[int] = []
    in_doubt: list[int] = []

    async def send() -> Sent:
        await acknowledged.wait()  # the leader answers again after the second keepalive
        return _sent()

    async def keepalive() -> None:
        keepalives.append(1)
        if len(keepalives) == 2:
            acknowledged.set()

    result = await publish_waiting(
        send(),
        publish_timeout=0.01,
        in_doubt_timeout=30,
        keepalive=keepalive,
        on_in_doubt=lambda: in_doubt.append(1),
    )
    assert result == _sent()
    assert (len(in_doubt), len(keepalives)) == (1, 2)


async def test_a_pass_gives_up_on_sends_in_doubt_only_after_the_bound() -> None:
    never = asyncio.Event()
    keepalives: list[int] = []
    cancelled = asyncio.Event()

    async def send() -> Sent:
        try:
            await never.wait()
        finally:
            cancelled.set()
        return _sent()

    async def keepalive() -> None:
        keepalives.append(1)

    with pytest.raises(InDoubt):
        await publish_waiting(
            send(),
            publish_timeout=0.01,
            in_doubt_timeout=0.05,
            keepalive=keepalive,
            on_in_doubt=lambda: None,
        )
    assert cancelled.is_set(), "the abandoned send is cancelled, not left running"
    assert keepalives, "the session was kept alive while waiting"
