"""The outbox relay: publishes committed outbox rows to Kafka at-least-once, in order per key.

Protocol (see db/queries/outbox.sql). Rows of one key share a lane. In one READ COMMITTED
transaction a pass locks up to ``max_lanes_per_pass`` lanes that have work
(``pg_try_advisory_xact_lock``, skipping lanes another relay holds), THEN reads each lane's
oldest unpublished rows, produces them with an idempotent producer, awaits every
acknowledgement, marks the acknowledged rows published and commits, which releases the
lanes. Reading after locking matters: the read's snapshot then includes everything the
previous holder of the lane committed, so no two relays publish a row twice. A relay that
dies before its commit leaves the rows unpublished; they are published again with the same
``outbox-id`` header (at-least-once).

What can go wrong with Kafka, and what the relay does about it:

- Kafka refuses one record (too large, unknown topic): only that row's lane waits. The lane
  cools down with backoff; then a pass sends only its head row (a probe), and the rest of
  the lane follows once the head is accepted, so the rows behind a poison row are not
  re-sent on every retry.
- The producer itself fails (closed, its sender task ended, fenced, out-of-order sequence,
  any other Kafka error that is not about the record): the rows acknowledged so far are
  marked, the producer is replaced and the loop backs off.
- Kafka does not answer: a pass waits at most ``publish_timeout`` for topic metadata, sends
  and acknowledgements. Then it rolls back (releasing its transaction and lanes) and the
  producer is replaced. Sends still in flight may land later: re-publishes with the same
  ``outbox-id``, which at-least-once allows.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aiokafka import AIOKafkaProducer
from aiokafka import errors as kafka_errors

import db.outbox as repo
from db.connector import connect, create_pool
from streams.clock import Clock, SystemClock
from streams.metrics import OutboxMetrics
from streams.outbox.records import KafkaHeaders, wire_headers
from streams.settings import ConfigError, Settings

if TYPE_CHECKING:
    from datetime import datetime

log = logging.getLogger(__name__)

DEFAULT_MAX_LANES_PER_PASS = 16


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
    """Idempotent, acks=all producers: a retried send can neither duplicate nor reorder."""

    def make() -> Producer:
        config: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "client_id": "outbox-relay",
            "acks": "all",
            "enable_idempotence": True,
            # A pass sends its rows back to back; a short linger fills batches.
            "linger_ms": 5,
            "max_batch_size": 256 * 1024,
        }
        config.update(options)
        producer: Producer = AIOKafkaProducer(**config)
        return producer

    return make


class TopicUnavailable(Exception):
    """No metadata for a row's topic within the bound (e.g. the topic does not exist)."""


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
    this reads its state: closed, or its background sender task ended (a crash fails every
    later send; a cancelled sender leaves sends waiting forever). Other producers (test
    doubles) always look healthy here."""
    if getattr(producer, "_closed", None) is True:
        return "closed"
    sender = getattr(producer, "_sender", None)
    task = getattr(sender, "sender_task", None)
    if isinstance(task, asyncio.Future) and task.done():
        return "sender_stopped"
    return None


@dataclass(frozen=True, slots=True)
class RelayConfig:
    batch_size: int = 500
    """Most rows per pass (one transaction), spread over the lanes that have work."""
    poll_interval: float = 1.0
    """Seconds between passes when no NOTIFY arrives."""
    max_lanes_per_pass: int = DEFAULT_MAX_LANES_PER_PASS
    """Most lanes one pass locks. A relay paused in the middle of a pass (a stopped process,
    a long GC, a hung host) holds at most this many of the 64 lanes; other relays keep
    publishing the rest. Fewer lanes per pass also let several relays share the work."""
    metrics_interval: float = 1.0
    """Backlog and oldest-age gauges are refreshed at most this often."""
    listener_check_interval: float = 30.0
    """How often the LISTEN connection is pinged to notice a silently dropped socket."""
    max_backoff: float = 30.0
    """Ceiling of the retry delay after failed passes and of a failing lane's cool-down."""
    stop_timeout: float = 30.0
    """``stop()`` waits this long for the current pass, then cancels (rolls it back)."""
    publish_timeout: float = 10.0
    """Longest a pass waits for Kafka (topic metadata, sends, acknowledgements) while it holds
    its transaction and lanes; then it rolls back and the producer is replaced. Also bounds
    starting a producer. Keep it well below PostgreSQL's idle_in_transaction_session_timeout,
    which would otherwise end the session first."""
    producer_stop_timeout: float = 5.0
    """How long the relay waits for a replaced producer to stop. One whose broker does not
    answer cannot stop (aiokafka flushes first): it goes on stopping in the background, and
    ``close()`` gives up on it after this long again."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError("RelayConfig.batch_size must be >= 1")
        if not 1 <= self.max_lanes_per_pass <= repo.LANES:
            raise ValueError(f"RelayConfig.max_lanes_per_pass must be in 1..{repo.LANES}")
        for name in (
            "poll_interval",
            "metrics_interval",
            "listener_check_interval",
            "max_backoff",
            "stop_timeout",
            "publish_timeout",
            "producer_stop_timeout",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"RelayConfig.{name} must be > 0")

    @classmethod
    def from_settings(cls, settings: Settings) -> RelayConfig:
        config = cls(
            batch_size=settings.outbox_batch_size,
            poll_interval=settings.outbox_poll_interval_seconds,
            metrics_interval=settings.outbox_poll_interval_seconds,
            max_lanes_per_pass=settings.outbox_max_lanes_per_pass,
            publish_timeout=settings.outbox_publish_timeout_seconds,
        )
        # A pass is idle in its transaction while it waits for Kafka; PostgreSQL must not end
        # the session first (the pass would fail instead of rolling back cleanly and
        # replacing its producer), so the publish timeout has to be clearly shorter.
        idle = getattr(settings, "db_idle_in_transaction_timeout_seconds", None)
        if idle and config.publish_timeout > idle / 2:
            raise ConfigError(
                "invalid configuration: setting OUTBOX_PUBLISH_TIMEOUT_SECONDS "
                f"({config.publish_timeout:g}) must be at most half of "
                f"DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS ({idle:g}): a relay pass waits "
                "for Kafka inside its transaction"
            )
        return config


@dataclass(frozen=True, slots=True)
class RelayResult:
    lanes: int
    """Lanes this pass locked."""
    published: int
    """Rows acknowledged by Kafka and marked published."""
    failed: int
    """Rows left unpublished because Kafka refused a row at or before them in their lane,
    or because the producer failed."""
    more: bool
    """Some lane may hold more rows: run another pass without waiting."""
    producer_replaced: bool = False
    """The producer failed during this pass and was replaced: the loop backs off."""


class RelayNotOpen(RuntimeError):
    pass


class PublishTimeout(RuntimeError):
    """Kafka did not acknowledge a pass's rows within ``publish_timeout``: the pass rolled
    back and released its lanes; the rows stay unpublished."""


class ProducerUnavailable(RuntimeError):
    """A new Kafka producer could not be started (within ``publish_timeout``)."""


@dataclass(slots=True)
class _Sent:
    acked: list[repo.PendingRow]
    """Acknowledged rows before their lane's first failure: these may be marked."""
    failed_lanes: set[int]
    """Lanes with a row that was not acknowledged, for whatever reason."""
    refused_lanes: set[int]
    """Lanes whose row Kafka refused (a record error): these cool down."""
    producer_error: BaseException | None
    """The first error that says the producer, not a record, failed."""


def _describe(exc: BaseException) -> str:
    # Type and message only: driver messages name objects, never row values we log on purpose.
    text = str(exc).replace("\n", " ")[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _retrieve(future: asyncio.Future[Any]) -> None:
    # A pass that timed out no longer awaits its futures: read their errors here so that
    # asyncio does not report them as never retrieved.
    if not future.cancelled():
        future.exception()


async def _wait_any(*events: asyncio.Event, within: float | None) -> None:
    """Return when any event is set or after ``within`` seconds."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


def _setter(event: asyncio.Event) -> Callable[[Any], None]:
    return lambda _conn: event.set()


class OutboxRelay:
    """Publishes ops.outbox. ``start()``/``stop()`` run it in the background (NOTIFY-driven
    with a polling fallback); ``run_once()`` is one pass, for tests and drain-and-exit use."""

    def __init__(
        self,
        *,
        dsn: str,
        metrics: OutboxMetrics,
        bootstrap: str | None = None,
        producer_factory: ProducerFactory | None = None,
        pool: Any = None,
        config: RelayConfig | None = None,
        clock: Clock | None = None,
        name: str | None = None,
    ) -> None:
        if producer_factory is None:
            if bootstrap is None:
                raise ValueError("OutboxRelay needs bootstrap or producer_factory")
            producer_factory = kafka_producer_factory(bootstrap)
        self.name = name or uuid.uuid4().hex[:8]
        self.config = config or RelayConfig()
        self._dsn = dsn
        self._metrics = metrics
        self._producer_factory = producer_factory
        self._clock: Clock = clock or SystemClock()
        self._pool: Any = pool
        self._own_pool = pool is None
        self._open = False
        self._producer: Producer | None = None
        # Replaced producers still stopping (their broker may not answer).
        self._retiring: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._listening = asyncio.Event()
        self._idle = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._listener_task: asyncio.Task[None] | None = None
        # Lane -> consecutive failed passes / monotonic time before which it is left alone.
        # A lane with failures that is due again is probed: only its head row is sent.
        self._lane_failures: dict[int, int] = {}
        self._lane_resume_at: dict[int, float] = {}
        self._metrics_due = -math.inf

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        metrics: OutboxMetrics,
        pool: Any = None,
        clock: Clock | None = None,
    ) -> OutboxRelay:
        return cls(
            dsn=settings.database_url,
            bootstrap=settings.kafka_bootstrap,
            metrics=metrics,
            pool=pool,
            config=RelayConfig.from_settings(settings),
            clock=clock,
        )

    # ------------------------------------------------------------------ lifecycle

    @property
    def listening(self) -> asyncio.Event:
        """Set while the LISTEN connection is up."""
        return self._listening

    @property
    def idle(self) -> asyncio.Event:
        """Set while the loop waits with no wake-up pending: only a NOTIFY, the next poll or
        ``stop()`` starts another pass."""
        return self._idle

    async def open(self) -> None:
        """Connect to PostgreSQL (unless given a pool) and Kafka, without starting the loop."""
        if self._open:
            return
        if self._pool is None:
            self._pool = await create_pool(self._dsn, min_size=1, max_size=2)
        try:
            await self._start_producer()
        except BaseException:
            await self._close_pool()
            raise
        self._open = True

    async def close(self) -> None:
        self._open = False
        producer, self._producer = self._producer, None
        if producer is not None:
            await self._stop_producer(producer)
        if self._retiring:
            _, stuck = await asyncio.wait(
                list(self._retiring), timeout=self.config.producer_stop_timeout
            )
            if stuck:
                log.warning(
                    "action=outbox_producer_abandoned relay=%s producers=%d",
                    self.name,
                    len(stuck),
                )
                for task in stuck:
                    task.cancel()
                await asyncio.gather(*stuck, return_exceptions=True)
        await self._close_pool()

    async def __aenter__(self) -> OutboxRelay:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("relay already started")
        await self.open()
        self._stopping.clear()
        self._listener_task = asyncio.create_task(self._listen(), name=f"outbox-listen-{self.name}")
        self._task = asyncio.create_task(self._run(), name=f"outbox-relay-{self.name}")
        log.info(
            "action=outbox_relay_start relay=%s batch_size=%d poll_interval=%s "
            "max_lanes_per_pass=%d publish_timeout=%s",
            self.name,
            self.config.batch_size,
            self.config.poll_interval,
            self.config.max_lanes_per_pass,
            self.config.publish_timeout,
        )

    async def stop(self) -> None:
        """Let the current pass finish (or cancel it after ``stop_timeout``: it rolls back),
        then close the listener, the producer and the pool if the relay created it."""
        self._stopping.set()
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), self.config.stop_timeout)
            except TimeoutError:
                log.warning("action=outbox_relay_stop_timeout relay=%s", self.name)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            except Exception as exc:
                log.error(
                    "action=outbox_relay_crashed relay=%s error=%s", self.name, _describe(exc)
                )
        listener, self._listener_task = self._listener_task, None
        if listener is not None:
            # It notices _stopping by itself and closes its connection; cancel only if stuck.
            try:
                await asyncio.wait_for(asyncio.shield(listener), 10)
            except Exception:
                listener.cancel()
                await asyncio.gather(listener, return_exceptions=True)
        await self.close()
        log.info("action=outbox_relay_stop relay=%s", self.name)

    # ------------------------------------------------------------------ producer

    async def _start_producer(self) -> Producer:
        producer = self._producer_factory()
        try:
            await asyncio.wait_for(producer.start(), self.config.publish_timeout)
        except Exception as exc:
            await self._stop_producer(producer)
            raise ProducerUnavailable(f"Kafka producer did not start: {_describe(exc)}") from exc
        except BaseException:
            self._stop_in_background(producer)
            raise
        self._producer = producer
        return producer

    async def _ready_producer(self) -> Producer:
        """The current producer, or a new one if there is none or it can send no more."""
        producer = self._producer
        if producer is not None:
            fault = producer_fault(producer)
            if fault is None:
                return producer
            await self._replace_producer(producer, fault, None)
        return await self._start_producer()

    async def _replace_producer(
        self, producer: Producer, reason: str, error: BaseException | None
    ) -> None:
        """Retire ``producer``; the next pass starts a new one from the factory."""
        if self._producer is producer:
            self._producer = None
        self._metrics.producer_restarts.labels(reason=reason).inc()
        log.warning(
            "action=outbox_producer_replaced relay=%s reason=%s error=%s",
            self.name,
            reason,
            _describe(error) if error is not None else "-",
        )
        await self._stop_producer(producer)

    def _stop_in_background(self, producer: Producer) -> asyncio.Task[None]:
        task = asyncio.create_task(self._stop_quietly(producer), name=f"outbox-stop-{self.name}")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        return task

    async def _stop_producer(self, producer: Producer) -> None:
        """Stop ``producer``, waiting at most ``producer_stop_timeout`` (it keeps stopping in
        the background when its broker does not answer)."""
        task = self._stop_in_background(producer)
        await asyncio.wait([task], timeout=self.config.producer_stop_timeout)

    async def _stop_quietly(self, producer: Producer) -> None:
        try:
            await producer.stop()
        except Exception as exc:
            log.warning(
                "action=outbox_producer_stop_failed relay=%s error=%s", self.name, _describe(exc)
            )

    # ------------------------------------------------------------------ one pass

    async def run_once(self) -> RelayResult:
        """One pass over up to ``max_lanes_per_pass`` lanes that have work and are not held by
        another relay. Raises ``PublishTimeout`` (rolled back) when Kafka does not answer in
        time and ``ProducerUnavailable`` when no producer can be started."""
        pool = self._opened()
        producer = await self._ready_producer()
        paused = self._paused_lanes()
        lanes: list[int] = []
        rows: list[repo.PendingRow] = []
        try:
            async with repo.lane_transaction(pool) as conn:
                lanes = await repo.lock_pending_lanes(
                    conn, exclude=paused, limit=self.config.max_lanes_per_pass
                )
                if not lanes:
                    return RelayResult(lanes=0, published=0, failed=0, more=False)
                probing = {lane for lane in lanes if lane in self._lane_failures}
                per_lane = max(1, math.ceil(self.config.batch_size / len(lanes)))
                rows = await repo.fetch_pending(conn, lanes, per_lane, probe=probing)
                try:
                    async with asyncio.timeout(self.config.publish_timeout):
                        sent = await self._produce(producer, rows)
                except TimeoutError:
                    # Leaving the block rolls back: the lanes are free for any relay again.
                    raise PublishTimeout(
                        f"Kafka did not acknowledge {len(rows)} rows of {len(lanes)} lanes "
                        f"within {self.config.publish_timeout:g}s"
                    ) from None
                published_at = self._clock.now()
                if sent.acked:
                    marked = await repo.mark_published(
                        conn, [r.id for r in sent.acked], published_at
                    )
                    if marked != len(sent.acked):
                        # Cannot happen while lanes are locked; say so loudly if it does.
                        log.error(
                            "action=outbox_mark_mismatch relay=%s acked=%d marked=%d",
                            self.name,
                            len(sent.acked),
                            marked,
                        )
        except PublishTimeout:
            log.warning(
                "action=outbox_publish_timeout relay=%s lanes=%d rows=%d timeout=%s",
                self.name,
                len(lanes),
                len(rows),
                self.config.publish_timeout,
            )
            await self._replace_producer(producer, "publish_timeout", None)
            raise
        # Committed: the rows are published for good.
        self._observe(sent.acked, published_at)
        self._track_lanes(lanes, sent)
        reason = producer_fault(producer)
        if reason is None and sent.producer_error is not None:
            reason = "fatal_error"
        if reason is not None:
            await self._replace_producer(producer, reason, sent.producer_error)
        per_lane_rows = Counter(r.lane for r in rows)
        # A probe that went through lets the rest of its lane follow in the next pass.
        more = any(
            lane not in sent.failed_lanes and (n >= per_lane or lane in probing)
            for lane, n in per_lane_rows.items()
        )
        if (
            self.config.max_lanes_per_pass < repo.LANES
            and len(lanes) == self.config.max_lanes_per_pass
        ):
            more = True
        result = RelayResult(
            lanes=len(lanes),
            published=len(sent.acked),
            failed=len(rows) - len(sent.acked),
            more=more,
            producer_replaced=reason is not None,
        )
        log.debug(
            "action=outbox_pass relay=%s lanes=%d probes=%d published=%d failed=%d "
            "first_id=%s last_id=%s",
            self.name,
            result.lanes,
            len(probing),
            result.published,
            result.failed,
            rows[0].id if rows else None,
            rows[-1].id if rows else None,
        )
        if sent.failed_lanes:
            self._metrics.errors.inc()
        return result

    async def refresh_metrics(self) -> repo.Backlog:
        """Set the backlog and oldest-unpublished-age gauges from the database."""
        pool = self._opened()
        async with pool.acquire() as conn:
            backlog = await repo.get_backlog(conn)
        self._metrics.backlog.set(backlog.count)
        age = 0.0
        if backlog.oldest_created_at is not None:
            age = max(0.0, (self._clock.now() - backlog.oldest_created_at).total_seconds())
        self._metrics.oldest_age.set(age)
        return backlog

    async def _produce(self, producer: Producer, rows: Sequence[repo.PendingRow]) -> _Sent:
        """Send ``rows`` (id order) and wait for every acknowledgement. Returns, per lane, the
        acknowledged rows before the lane's first failed row: marking a later row of a lane
        but not an earlier one would reorder its keys. The caller bounds the time."""
        first_failure: dict[int, int] = {}
        refused: set[int] = set()
        producer_error: BaseException | None = None

        def failed(row: repo.PendingRow, exc: BaseException) -> None:
            nonlocal producer_error
            first_failure[row.lane] = min(row.id, first_failure.get(row.lane, row.id))
            if is_record_error(exc):
                refused.add(row.lane)
                self._log_refused(row, exc)
            elif producer_error is None:
                producer_error = exc
                log.warning(
                    "action=outbox_producer_failed relay=%s outbox_id=%d topic=%s error=%s",
                    self.name,
                    row.id,
                    row.topic,
                    _describe(exc),
                )

        unavailable = await self._check_topics(producer, {r.topic for r in rows})
        sent: list[tuple[repo.PendingRow, asyncio.Future[Any]]] = []
        for row in rows:
            if producer_error is not None:
                break  # the producer is unusable: the rest waits for the next one
            if row.lane in first_failure:
                continue  # the rest of the lane waits for the next pass anyway
            topic_error = unavailable.get(row.topic)
            if topic_error is not None:
                failed(row, topic_error)
                continue
            try:
                future = await producer.send(
                    row.topic,
                    value=row.payload.encode("utf-8"),
                    key=row.key.encode("utf-8"),
                    headers=wire_headers(row.id, row.headers),
                )
            except Exception as exc:  # record too large for the client, producer closed, ...
                failed(row, exc)
                continue
            future.add_done_callback(_retrieve)
            sent.append((row, future))
        if sent:
            # asyncio.wait, not gather: a timeout must not cancel the producer's futures.
            await asyncio.wait([f for _, f in sent])
        acked_candidates: list[repo.PendingRow] = []
        for row, future in sent:
            if future.cancelled():
                failed(row, asyncio.CancelledError())
                continue
            error = future.exception()
            if error is not None:
                failed(row, error)
            else:
                acked_candidates.append(row)
        acked = [r for r in acked_candidates if r.id < first_failure.get(r.lane, math.inf)]
        return _Sent(
            acked=acked,
            failed_lanes=set(first_failure),
            refused_lanes=refused,
            producer_error=producer_error,
        )

    async def _check_topics(
        self, producer: Producer, topics: Collection[str]
    ) -> dict[str, BaseException]:
        """Topics whose metadata the producer cannot get, each looked up within half the
        publish timeout (concurrently). Without this, a send to a topic Kafka does not know
        waits for its metadata (request_timeout_ms, 40 s by default) and every later row of
        the pass waits behind it; now only that topic's lanes are refused."""
        bound = self.config.publish_timeout / 2

        async def check(topic: str) -> BaseException | None:
            try:
                await asyncio.wait_for(producer.partitions_for(topic), bound)
            except TimeoutError:
                return TopicUnavailable(f"no metadata for the topic within {bound:g}s")
            except Exception as exc:
                return exc
            return None

        names = sorted(topics)
        outcomes = await asyncio.gather(*(check(t) for t in names))
        return {t: e for t, e in zip(names, outcomes, strict=True) if e is not None}

    def _log_refused(self, row: repo.PendingRow, exc: BaseException) -> None:
        log.warning(
            "action=outbox_publish_refused relay=%s outbox_id=%d topic=%s lane=%d error=%s",
            self.name,
            row.id,
            row.topic,
            row.lane,
            _describe(exc),
        )

    def _observe(self, acked: Sequence[repo.PendingRow], published_at: datetime) -> None:
        for topic, count in Counter(r.topic for r in acked).items():
            self._metrics.published.labels(topic=topic).inc(count)
        for row in acked:
            self._metrics.lag.observe(max(0.0, (published_at - row.created_at).total_seconds()))

    def _paused_lanes(self) -> list[int]:
        now = self._clock.monotonic()
        return [lane for lane, until in self._lane_resume_at.items() if until > now]

    def _track_lanes(self, lanes: Sequence[int], sent: _Sent) -> None:
        # A lane whose head Kafka refuses cools down, and when due is probed with its head
        # row only, so a poison row is retried with backoff without re-sending the rows
        # behind it. A lane held back by a failed producer is retried at once by the next.
        for lane in lanes:
            if lane in sent.refused_lanes:
                n = self._lane_failures.get(lane, 0) + 1
                self._lane_failures[lane] = n
                self._lane_resume_at[lane] = self._clock.monotonic() + self._backoff(n)
            elif lane not in sent.failed_lanes:
                self._lane_failures.pop(lane, None)
                self._lane_resume_at.pop(lane, None)

    def _backoff(self, attempt: int) -> float:
        return float(min(self.config.max_backoff, 0.25 * 2 ** min(attempt - 1, 16)))

    def _opened(self) -> Any:
        if not self._open or self._pool is None:
            raise RelayNotOpen("call open() or start() before using the relay")
        return self._pool

    async def _close_pool(self) -> None:
        if self._own_pool and self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    # ------------------------------------------------------------------ background loop

    async def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            # Cleared before the pass: a NOTIFY that lands during it triggers the next one.
            self._wake.clear()
            self._idle.clear()
            try:
                result = await self.run_once()
            except Exception as exc:
                failures += 1
                self._metrics.errors.inc()
                log.warning(
                    "action=outbox_pass_failed relay=%s attempt=%d error=%s",
                    self.name,
                    failures,
                    _describe(exc),
                )
                await _wait_any(self._stopping, within=self._backoff(failures))
                continue
            if result.producer_replaced:
                failures += 1
                await _wait_any(self._stopping, within=self._backoff(failures))
                continue
            failures = 0
            await self._refresh_metrics_if_due()
            if result.more or self._wake.is_set():
                continue
            self._idle.set()
            await _wait_any(self._wake, self._stopping, within=self.config.poll_interval)

    async def _refresh_metrics_if_due(self) -> None:
        now = self._clock.monotonic()
        if now < self._metrics_due:
            return
        self._metrics_due = now + self.config.metrics_interval
        try:
            await self.refresh_metrics()
        except Exception as exc:
            log.warning("action=outbox_metrics_failed relay=%s error=%s", self.name, _describe(exc))

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, _payload: str) -> None:
        self._wake.set()

    async def _listen(self) -> None:
        """Keep a dedicated LISTEN connection (a pooled one would lose LISTEN on release)."""
        failures = 0
        while not self._stopping.is_set():
            conn: Any = None
            lost = asyncio.Event()
            try:
                conn = await connect(self._dsn, timeout=10)
                conn.add_termination_listener(_setter(lost))
                await repo.listen(conn, self._on_notify)
                failures = 0
                self._listening.set()
                # NOTIFYs sent while nobody listened are gone: one pass catches up on them.
                self._wake.set()
                log.info("action=outbox_listen relay=%s channel=%s", self.name, repo.CHANNEL)
                while not (self._stopping.is_set() or lost.is_set()):
                    await _wait_any(
                        self._stopping, lost, within=self.config.listener_check_interval
                    )
                    if not (self._stopping.is_set() or lost.is_set()):
                        await asyncio.wait_for(repo.ping(conn), timeout=10)
                if lost.is_set():
                    raise ConnectionError("LISTEN connection closed")
            except Exception as exc:
                failures += 1
                log.warning(
                    "action=outbox_listen_lost relay=%s attempt=%d error=%s",
                    self.name,
                    failures,
                    _describe(exc),
                )
            finally:
                self._listening.clear()
                if conn is not None:
                    await self._close_quietly(conn)
            if not self._stopping.is_set():
                await _wait_any(self._stopping, within=self._backoff(failures))

    @staticmethod
    async def _close_quietly(conn: Any) -> None:
        try:
            await asyncio.wait_for(conn.close(), timeout=5)
        except asyncio.CancelledError:
            conn.terminate()
            raise
        except Exception:
            conn.terminate()
