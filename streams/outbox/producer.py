"""The relay's Kafka producer: what it needs, which errors are about a record and which about
the producer, and a slot that replaces a producer that can send no more."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer
from aiokafka import errors as kafka_errors

from streams import logs
from streams.asynctools import describe
from streams.faust_compat import abort, producer_closed, sender_task
from streams.metrics import OutboxMetrics
from streams.outbox.partitioner import kafka_partitioner
from streams.outbox.records import KafkaHeaders

log = logging.getLogger("streams.outbox.relay")


class Producer(Protocol):
    """The part of ``aiokafka.AIOKafkaProducer`` the relay uses."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def partitions_for(self, topic: str) -> set[int]: ...

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: KafkaHeaders | None = None,
    ) -> asyncio.Future[Any]: ...


ProducerFactory = Callable[[], Producer]


def kafka_producer_factory(bootstrap: str, **options: Any) -> ProducerFactory:
    """Idempotent, acks=all producers: a retried send can neither duplicate nor reorder.
    ``options`` are more aiokafka settings (security: ``streams.kafka_client``)."""

    def make() -> Producer:
        config: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "client_id": "outbox-relay",
            "acks": "all",
            "enable_idempotence": True,
            # A pass appends all its rows before the sender runs, so batches fill without a
            # linger; any linger would only add to every reminder's lateness.
            "linger_ms": 0,
            "max_batch_size": 256 * 1024,
            # Kafka's default partition for a key, hashed in half aiokafka's time
            # (streams/outbox/partitioner.py).
            "partitioner": kafka_partitioner,
        }
        config.update(options)
        # A batch is never larger than one record may be (OUTBOX_MAX_RECORD_BYTES): a topic
        # that takes the largest record then takes every batch.
        config["max_batch_size"] = min(
            config["max_batch_size"], config.get("max_request_size", 1_048_576)
        )
        producer: Producer = AIOKafkaProducer(**config)
        return producer

    return make


class TopicUnavailable(Exception):
    """No metadata for a row's topic within the bound (e.g. the topic does not exist)."""


class ProducerUnavailable(RuntimeError):
    """A new Kafka producer could not be started (within ``publish_timeout``)."""


# Kafka refused the record itself (its size, its topic, its content): only its lane waits.
RECORD_ERRORS: tuple[type[BaseException], ...] = (
    kafka_errors.MessageSizeTooLargeError,
    kafka_errors.RecordTooLargeError,
    kafka_errors.RecordListTooLargeError,
    kafka_errors.UnknownTopicOrPartitionError,
    kafka_errors.TopicAuthorizationFailedError,
    kafka_errors.InvalidTopicError,
    kafka_errors.CorruptRecordException,
    kafka_errors.InvalidTimestampError,
    kafka_errors.PolicyViolationError,
    kafka_errors.UnsupportedForMessageFormatError,
    TopicUnavailable,
)


def is_record_error(exc: BaseException) -> bool:
    """True when ``exc`` refuses one record (its lane waits, the producer is fine); False when
    the producer failed as a whole: any other Kafka error (fenced, out-of-order sequence,
    closed, timed out, sender crashed) or a cancelled send. Errors that are not Kafka's
    (a value the client cannot serialize) concern the record."""
    if isinstance(exc, RECORD_ERRORS):
        return True
    return isinstance(exc, Exception) and not isinstance(exc, kafka_errors.KafkaError)


def producer_fault(producer: object) -> str | None:
    """Why ``producer`` can send no more, or None. aiokafka has no public health check, so
    this reads its state (streams/faust_compat): closed, or its background sender task
    ended (a crash fails every later send; a cancelled sender leaves sends waiting
    forever). Other producers (test doubles, wrappers) always look healthy here."""
    if not isinstance(producer, AIOKafkaProducer):
        return None
    if producer_closed(producer):
        return "closed"
    task = sender_task(producer)
    if task is not None and task.done():
        return "sender_stopped"
    return None


class ProducerAborted(kafka_errors.KafkaError):  # type: ignore[misc]
    """The relay gave up on this send: its row goes out again, from another producer."""


async def abort_producer(producer: Producer) -> None:
    """Stop ``producer`` without delivering what it still holds. ``stop()`` flushes first,
    and an idempotent aiokafka producer retries a batch until it is acknowledged, so a
    producer retired with sends in flight would deliver them whenever its broker answers
    again, after the relay has sent the same rows from a new producer: every one of them
    twice. Here the sender ends (it waits for the requests already on the wire, which only
    their broker can still write), every queued batch fails, and the connections close.
    aiokafka has no public abort, so this uses its internals (streams/faust_compat);
    other producers (test doubles, wrappers) are just stopped."""
    if not isinstance(producer, AIOKafkaProducer):
        await producer.stop()
        return
    await abort(producer, ProducerAborted("the relay gave up on this send"))


class ProducerSlot:
    """Holds the relay's current producer; starts one on demand and retires one that failed.

    A retired producer is stopped within ``stop_timeout``; one whose broker does not answer
    cannot stop (aiokafka flushes first) and goes on stopping in the background until
    ``close()`` gives up on it.
    """

    def __init__(
        self,
        factory: ProducerFactory,
        metrics: OutboxMetrics,
        *,
        start_timeout: float,
        stop_timeout: float,
        name: str,
    ) -> None:
        self._factory = factory
        self._metrics = metrics
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._name = name
        self.current: Producer | None = None
        self._retiring: set[asyncio.Task[None]] = set()

    async def start(self) -> Producer:
        producer = self._factory()
        try:
            await asyncio.wait_for(producer.start(), self._start_timeout)
        except Exception as exc:
            await self._stop(producer)
            raise ProducerUnavailable(f"Kafka producer did not start: {describe(exc)}") from exc
        except BaseException:
            self._stop_in_background(producer)
            raise
        self.current = producer
        return producer

    async def ready(self) -> Producer:
        """The current producer, or a new one if there is none or it can send no more."""
        producer = self.current
        if producer is not None:
            fault = producer_fault(producer)
            if fault is None:
                return producer
            await self.replace(producer, fault, None)
        return await self.start()

    async def replace(
        self,
        producer: Producer,
        reason: str,
        error: BaseException | None,
        *,
        abort: bool = False,
    ) -> None:
        """Retire ``producer``; the next ``ready()`` starts a new one from the factory.
        ``abort``: its queued sends must never be delivered (``abort_producer``), because the
        rows they carry are sent again by whichever relay takes their lanes next."""
        task = self.retire(producer, reason, error, abort=abort)
        await asyncio.wait([task], timeout=self._stop_timeout)

    def retire(
        self,
        producer: Producer,
        reason: str,
        error: BaseException | None,
        *,
        abort: bool = False,
    ) -> asyncio.Task[None]:
        """``replace`` without waiting for the producer to stop (for a cancelled pass)."""
        if self.current is producer:
            self.current = None
        self._metrics.producer_restarts.labels(reason=reason).inc()
        logs.event(
            log,
            logging.WARNING,
            "outbox_producer_replaced",
            relay=self._name,
            reason=reason,
            error=describe(error) if error is not None else "-",
        )
        return self._stop_in_background(producer, abort=abort)

    async def close(self) -> None:
        producer, self.current = self.current, None
        if producer is not None:
            await self._stop(producer)
        if self._retiring:
            _, stuck = await asyncio.wait(list(self._retiring), timeout=self._stop_timeout)
            if stuck:
                logs.event(
                    log,
                    logging.WARNING,
                    "outbox_producer_abandoned",
                    relay=self._name,
                    producers=len(stuck),
                )
                for task in stuck:
                    task.cancel()
                await asyncio.gather(*stuck, return_exceptions=True)

    def _stop_in_background(self, producer: Producer, *, abort: bool = False) -> asyncio.Task[None]:
        task = asyncio.create_task(
            self._stop_quietly(producer, abort=abort), name=f"outbox-stop-{self._name}"
        )
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        return task

    async def _stop(self, producer: Producer) -> None:
        task = self._stop_in_background(producer)
        await asyncio.wait([task], timeout=self._stop_timeout)

    async def _stop_quietly(self, producer: Producer, *, abort: bool) -> None:
        try:
            await (abort_producer(producer) if abort else producer.stop())
        except Exception as exc:
            logs.event(
                log,
                logging.WARNING,
                "outbox_producer_stop_failed",
                relay=self._name,
                error=describe(exc),
            )
