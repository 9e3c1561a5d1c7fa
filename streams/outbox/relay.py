"""The outbox relay: publishes committed outbox rows to Kafka at-least-once, in order per key.

Protocol (see db/queries/outbox.sql). Rows of one key share a lane. In one READ COMMITTED
transaction a pass locks the lanes that have work (``pg_try_advisory_xact_lock``, skipping
lanes another relay holds), THEN reads each lane's oldest unpublished rows, produces them
with an idempotent producer, awaits every acknowledgement, marks the acknowledged rows
published and commits, which releases the lanes. Reading after locking matters: the read's
snapshot then includes everything the previous holder of the lane committed, so no two
relays publish a row twice. A relay that dies before its commit leaves the rows
unpublished; they are published again with the same ``outbox-id`` header (at-least-once).
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aiokafka import AIOKafkaProducer

import db.outbox as repo
from db.connector import connect, create_pool
from streams.clock import Clock, SystemClock
from streams.metrics import OutboxMetrics
from streams.outbox.records import KafkaHeaders, wire_headers
from streams.settings import Settings

if TYPE_CHECKING:
    from datetime import datetime

log = logging.getLogger(__name__)


class Producer(Protocol):
    """The part of ``aiokafka.AIOKafkaProducer`` the relay uses."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

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


@dataclass(frozen=True, slots=True)
class RelayConfig:
    batch_size: int = 500
    """Most rows per pass (one transaction), spread over the lanes that have work."""
    poll_interval: float = 1.0
    """Seconds between passes when no NOTIFY arrives."""
    max_lanes_per_pass: int = repo.LANES
    """Fewer than all lanes lets several relays share the work instead of taking turns."""
    metrics_interval: float = 1.0
    """Backlog and oldest-age gauges are refreshed at most this often."""
    listener_check_interval: float = 30.0
    """How often the LISTEN connection is pinged to notice a silently dropped socket."""
    max_backoff: float = 30.0
    """Ceiling of the retry delay after failed passes and of a failing lane's cool-down."""
    stop_timeout: float = 30.0
    """``stop()`` waits this long for the current pass, then cancels (rolls it back)."""

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
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"RelayConfig.{name} must be > 0")

    @classmethod
    def from_settings(cls, settings: Settings) -> RelayConfig:
        return cls(
            batch_size=settings.outbox_batch_size,
            poll_interval=settings.outbox_poll_interval_seconds,
            metrics_interval=settings.outbox_poll_interval_seconds,
        )


@dataclass(frozen=True, slots=True)
class RelayResult:
    lanes: int
    """Lanes this pass locked."""
    published: int
    """Rows acknowledged by Kafka and marked published."""
    failed: int
    """Rows left unpublished because Kafka refused a row at or before them in their lane."""
    more: bool
    """Some lane may hold more rows: run another pass without waiting."""


class RelayNotOpen(RuntimeError):
    pass


def _describe(exc: BaseException) -> str:
    # Type and message only: driver messages name objects, never row values we log on purpose.
    text = str(exc).replace("\n", " ")[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


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
        self._producer: Producer | None = None
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._listening = asyncio.Event()
        self._idle = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._listener_task: asyncio.Task[None] | None = None
        # Lane -> consecutive failed passes / monotonic time before which it is left alone.
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
        if self._producer is not None:
            return
        if self._pool is None:
            self._pool = await create_pool(self._dsn, min_size=1, max_size=2)
        producer = self._producer_factory()
        try:
            await producer.start()
        except BaseException:
            await producer.stop()
            await self._close_pool()
            raise
        self._producer = producer

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()
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
            "action=outbox_relay_start relay=%s batch_size=%d poll_interval=%s",
            self.name,
            self.config.batch_size,
            self.config.poll_interval,
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

    # ------------------------------------------------------------------ one pass

    async def run_once(self) -> RelayResult:
        """One pass over every lane that has work and is not held by another relay."""
        pool, producer = self._opened()
        paused = self._paused_lanes()
        async with repo.lane_transaction(pool) as conn:
            lanes = await repo.lock_pending_lanes(
                conn, exclude=paused, limit=self.config.max_lanes_per_pass
            )
            if not lanes:
                return RelayResult(lanes=0, published=0, failed=0, more=False)
            per_lane = max(1, math.ceil(self.config.batch_size / len(lanes)))
            rows = await repo.fetch_pending(conn, lanes, per_lane)
            acked, failed_lanes = await self._produce(producer, rows)
            published_at = self._clock.now()
            if acked:
                marked = await repo.mark_published(conn, [r.id for r in acked], published_at)
                if marked != len(acked):
                    # Cannot happen while lanes are locked; say so loudly if it does.
                    log.error(
                        "action=outbox_mark_mismatch relay=%s acked=%d marked=%d",
                        self.name,
                        len(acked),
                        marked,
                    )
        # Committed: the rows are published for good.
        self._observe(acked, published_at)
        self._track_lanes(lanes, failed_lanes)
        per_lane_rows = Counter(r.lane for r in rows)
        more = any(n >= per_lane and lane not in failed_lanes for lane, n in per_lane_rows.items())
        if (
            self.config.max_lanes_per_pass < repo.LANES
            and len(lanes) == self.config.max_lanes_per_pass
        ):
            more = True
        result = RelayResult(
            lanes=len(lanes), published=len(acked), failed=len(rows) - len(acked), more=more
        )
        log.debug(
            "action=outbox_pass relay=%s lanes=%d published=%d failed=%d first_id=%s last_id=%s",
            self.name,
            result.lanes,
            result.published,
            result.failed,
            rows[0].id if rows else None,
            rows[-1].id if rows else None,
        )
        if failed_lanes:
            self._metrics.errors.inc()
        return result

    async def refresh_metrics(self) -> repo.Backlog:
        """Set the backlog and oldest-unpublished-age gauges from the database."""
        pool, _ = self._opened()
        async with pool.acquire() as conn:
            backlog = await repo.get_backlog(conn)
        self._metrics.backlog.set(backlog.count)
        age = 0.0
        if backlog.oldest_created_at is not None:
            age = max(0.0, (self._clock.now() - backlog.oldest_created_at).total_seconds())
        self._metrics.oldest_age.set(age)
        return backlog

    async def _produce(
        self, producer: Producer, rows: Sequence[repo.PendingRow]
    ) -> tuple[list[repo.PendingRow], set[int]]:
        """Send ``rows`` (id order) and wait for every acknowledgement. Returns, per lane, the
        acknowledged rows before the lane's first refused row, and the lanes with a refusal:
        marking a later row of a lane but not an earlier one would reorder its keys."""
        first_failure: dict[int, int] = {}
        sent: list[tuple[repo.PendingRow, asyncio.Future[Any]]] = []
        for row in rows:
            if row.lane in first_failure:
                continue  # the rest of the lane waits for the next pass anyway
            try:
                future = await producer.send(
                    row.topic,
                    value=row.payload.encode("utf-8"),
                    key=row.key.encode("utf-8"),
                    headers=wire_headers(row.id, row.headers),
                )
            except Exception as exc:  # unknown topic, record too large, ...: this lane only
                first_failure[row.lane] = row.id
                self._log_refused(row, exc)
                continue
            sent.append((row, future))
        outcomes = await asyncio.gather(*(f for _, f in sent), return_exceptions=True)
        for (row, _), outcome in zip(sent, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if row.id < first_failure.get(row.lane, math.inf):
                    first_failure[row.lane] = row.id
                self._log_refused(row, outcome)
        acked = [
            row
            for (row, _), outcome in zip(sent, outcomes, strict=True)
            if not isinstance(outcome, BaseException)
            and row.id < first_failure.get(row.lane, math.inf)
        ]
        return acked, set(first_failure)

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

    def _track_lanes(self, lanes: Sequence[int], failed: set[int]) -> None:
        # A lane whose head Kafka refuses cools down, so a poison row is retried with backoff
        # instead of every pass re-sending the rows behind it.
        for lane in lanes:
            if lane in failed:
                n = self._lane_failures.get(lane, 0) + 1
                self._lane_failures[lane] = n
                self._lane_resume_at[lane] = self._clock.monotonic() + self._backoff(n)
            else:
                self._lane_failures.pop(lane, None)
                self._lane_resume_at.pop(lane, None)

    def _backoff(self, attempt: int) -> float:
        return float(min(self.config.max_backoff, 0.25 * 2 ** min(attempt - 1, 16)))

    def _opened(self) -> tuple[Any, Producer]:
        if self._pool is None or self._producer is None:
            raise RelayNotOpen("call open() or start() before using the relay")
        return self._pool, self._producer

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
