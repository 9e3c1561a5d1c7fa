"""The outbox relay: publishes committed outbox rows to Kafka at-least-once, in order per key.

Protocol (see db/queries/outbox.sql). Rows of one key share a lane. In one READ COMMITTED
transaction a pass locks up to ``max_lanes_per_pass`` lanes that have work
(``pg_try_advisory_xact_lock``, skipping lanes another relay holds), THEN reads each lane's
oldest unpublished rows, produces them with an idempotent producer, awaits every
acknowledgement, marks the acknowledged rows published (with Kafka's partition and offset)
and commits, which releases the lanes. Reading after locking matters: the read then sees
all the previous holder of the lane committed, so no two relays publish a row twice. A
relay that dies before its commit leaves the rows unpublished; they go out again with the
same ``outbox-id`` header (at-least-once).

What can go wrong with Kafka, and what the relay does about it:

- Kafka refuses one record (too large, unknown topic): only that row's lane waits; it cools
  down, then is probed with its head row alone (streams/outbox/lanes.py). A row refused for
  a reason that will not change by itself (too large, a topic that stays unknown, not
  authorized) is parked: moved to ops.outbox_parked in the pass's transaction, so the rest of
  its lane goes on at once (streams/outbox/parking.py; ``python -m streams outbox``).
- The producer itself fails (closed, its sender task ended, fenced, out-of-order sequence,
  any other Kafka error that is not about the record): the rows acknowledged so far are
  marked, the producer is replaced and the loop backs off.
- Kafka does not answer (a broker failover, a silent network): after ``publish_timeout``
  the pass's sends are in doubt, since the idempotent producer retries them until their
  partition has a leader, and a row sent again from a new producer would land twice. So
  the pass goes on waiting, holding its lanes and keeping its session alive, up to
  ``in_doubt_timeout``. Only then does it roll back and abort the producer (nothing it
  still holds is delivered); a request that was already on the wire may still be written:
  a re-publish with the same ``outbox-id``, which at-least-once allows.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

import db.outbox as repo
from db.connector import Connection, SessionLimits, connection, create_pool
from streams.asynctools import describe, wait_any
from streams.clock import Clock, SystemClock
from streams.kafka_client import security_options
from streams.metrics import OutboxMetrics
from streams.outbox.config import PublishTimeout, RelayConfig, RelayNotOpen, RelayResult
from streams.outbox.lanes import LaneCooldown
from streams.outbox.limits import topics_below_limit
from streams.outbox.listener import NotifyListener
from streams.outbox.parking import Park, ParkPolicy
from streams.outbox.producer import (
    ProducerFactory,
    ProducerSlot,
    ProducerUnavailable,
    kafka_producer_factory,
    producer_fault,
)
from streams.outbox.publish import InDoubt, Sent, publish, publish_waiting
from streams.settings import Settings

if TYPE_CHECKING:
    from datetime import datetime

log = logging.getLogger(__name__)


class OutboxRelay:
    """Publishes ops.outbox. ``start()``/``stop()`` run it in the background (NOTIFY-driven
    with a polling fallback); ``run_once()`` is one pass, for tests and drain-and-exit use."""

    def __init__(
        self,
        *,
        dsn: str,
        metrics: OutboxMetrics,
        bootstrap: str | None = None,
        kafka_options: dict[str, Any] | None = None,
        producer_factory: ProducerFactory | None = None,
        pool: Any = None,
        config: RelayConfig | None = None,
        clock: Clock | None = None,
        name: str | None = None,
        limits: SessionLimits | None = None,
        topic_check: Callable[[], Coroutine[Any, Any, object]] | None = None,
    ) -> None:
        self.name = name or uuid.uuid4().hex[:8]
        self.config = config or RelayConfig()
        if producer_factory is None:
            if bootstrap is None:
                raise ValueError("OutboxRelay needs bootstrap or producer_factory")
            options = {"max_request_size": self.config.max_record_bytes, **(kafka_options or {})}
            producer_factory = kafka_producer_factory(bootstrap, **options)
        self._dsn = dsn
        self._metrics = metrics
        self._clock: Clock = clock or SystemClock()
        self._pool: Any = pool
        self._own_pool = pool is None
        self._limits = limits
        self._open = False
        self._producers = ProducerSlot(
            producer_factory,
            metrics,
            start_timeout=self.config.publish_timeout,
            stop_timeout=self.config.producer_stop_timeout,
            name=self.name,
        )
        self._lanes = LaneCooldown(self.config.max_backoff)
        self._parking = ParkPolicy(self.config.park_topic_wait)
        # Topic -> (monotonic time until which it counts as unavailable, the lookup's error):
        # a topic found without metadata is not looked up again by every pass.
        self._unavailable: dict[str, tuple[float, BaseException]] = {}
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._idle = asyncio.Event()
        self._listener = NotifyListener(
            dsn,
            self._wake,
            check_interval=self.config.listener_check_interval,
            backoff=self._lanes.backoff,
            name=self.name,
        )
        self._task: asyncio.Task[None] | None = None
        self._listener_task: asyncio.Task[None] | None = None
        self._metrics_due = -math.inf
        # Run once at start(), in the background: the topics' limits against the producer's.
        self._topic_check = topic_check
        self._check_task: asyncio.Task[object] | None = None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        metrics: OutboxMetrics,
        pool: Any = None,
        clock: Clock | None = None,
    ) -> OutboxRelay:
        config = RelayConfig.from_settings(settings)
        return cls(
            dsn=settings.database_url,
            bootstrap=settings.kafka_bootstrap,
            kafka_options=security_options(settings),
            metrics=metrics,
            pool=pool,
            config=config,
            topic_check=lambda: topics_below_limit(settings, config.max_record_bytes),
            clock=clock,
            limits=SessionLimits(
                lock_timeout_seconds=settings.db_lock_timeout_seconds,
                idle_in_transaction_seconds=settings.db_idle_in_transaction_timeout_seconds,
            ),
        )

    # ------------------------------------------------------------------ lifecycle

    @property
    def listening(self) -> asyncio.Event:
        """Set while the LISTEN connection is up."""
        return self._listener.listening

    @property
    def idle(self) -> asyncio.Event:
        """Set while the loop waits with no wake-up pending: only a NOTIFY, the next poll or
        ``stop()`` starts another pass."""
        return self._idle

    async def open(self, *, require_producer: bool = True) -> None:
        """Connect to PostgreSQL (unless given a pool) and Kafka, without starting the loop.
        ``start()`` opens without ``require_producer``: a Kafka that is down at start-up does
        not stop the relay (nor its process); its passes retry the producer."""
        if self._open:
            return
        if self._pool is None:
            self._pool = await create_pool(
                self._dsn,
                min_size=1,
                max_size=2,
                limits=self._limits,
                application_name=f"outbox-relay:{self.name}",
            )
        try:
            await self._producers.start()
        except ProducerUnavailable as exc:
            if require_producer:
                await self._close_pool()
                raise
            # Kafka is down: the loop's passes start a producer (with backoff) once it is back.
            log.warning(
                "action=outbox_relay_start_without_kafka relay=%s error=%s",
                self.name,
                describe(exc),
            )
        except BaseException:
            await self._close_pool()
            raise
        self._open = True

    async def close(self) -> None:
        self._open = False
        await self._producers.close()
        await self._close_pool()

    async def __aenter__(self) -> OutboxRelay:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("relay already started")
        await self.open(require_producer=False)
        self._stopping.clear()
        self._listener_task = asyncio.create_task(
            self._listener.run(self._stopping), name=f"outbox-listen-{self.name}"
        )
        self._task = asyncio.create_task(self._run(), name=f"outbox-relay-{self.name}")
        if self._topic_check is not None:
            self._check_task = asyncio.create_task(
                self._topic_check(), name=f"outbox-topic-check-{self.name}"
            )
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
        check, self._check_task = self._check_task, None
        if check is not None:
            check.cancel()
            await asyncio.gather(check, return_exceptions=True)
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), self.config.stop_timeout)
            except TimeoutError:
                log.warning("action=outbox_relay_stop_timeout relay=%s", self.name)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            except Exception as exc:
                log.error("action=outbox_relay_crashed relay=%s error=%s", self.name, describe(exc))
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
        """One pass over up to ``max_lanes_per_pass`` lanes that have work and are not held by
        another relay. Raises ``PublishTimeout`` (rolled back) when Kafka does not answer in
        time and ``ProducerUnavailable`` when no producer can be started."""
        pool = self._opened()
        producer = await self._producers.ready()
        paused = self._lanes.paused(self._clock.monotonic())
        lanes: list[int] = []
        rows: list[repo.PendingRow] = []
        inflight: list[asyncio.Future[Any]] = []
        parks: list[Park] = []
        try:
            async with repo.lane_transaction(pool) as conn:
                lanes = await repo.lanes_lock(
                    conn, exclude=paused, limit=self.config.max_lanes_per_pass
                )
                if not lanes:
                    return RelayResult(lanes=0, published=0, failed=0, more=False)
                probing = self._lanes.probing(lanes)
                per_lane = max(1, math.ceil(self.config.batch_size / len(lanes)))
                rows = await repo.pending_get(conn, lanes, per_lane, probe=probing)
                try:
                    sent = await publish_waiting(
                        publish(
                            producer,
                            rows,
                            metadata_bound=self.config.publish_timeout / 2,
                            relay=self.name,
                            inflight=inflight,
                            known_unavailable=self._known_unavailable(),
                        ),
                        publish_timeout=self.config.publish_timeout,
                        in_doubt_timeout=self.config.in_doubt_timeout,
                        keepalive=lambda: repo.pass_keepalive(conn),
                        on_in_doubt=lambda: self._in_doubt(lanes, rows),
                    )
                except InDoubt:
                    # Leaving the block rolls back: the lanes are free for any relay again.
                    raise PublishTimeout(
                        f"Kafka did not acknowledge {len(rows)} rows of {len(lanes)} lanes "
                        f"within {self.config.in_doubt_timeout:g}s"
                    ) from None
                published_at = self._clock.now()
                parks = self._parking.decide(
                    list(sent.refusals.values()),
                    now=self._clock.monotonic(),
                    kafka_answered=bool(sent.candidates),
                    acked_topics={r.topic for r in sent.candidates},
                )
                if parks:
                    await self._park(conn, parks, published_at)
                    # The parked rows left their lanes: what Kafka acknowledged behind them
                    # may be marked now.
                    sent.acked = sent.acked_without({p.outbox_id for p in parks})
                if sent.acked:
                    placed = [(r.id, *sent.placed.get(r.id, (None, None))) for r in sent.acked]
                    marked = await repo.published_mark(conn, placed, published_at)
                    if marked != len(sent.acked):  # cannot happen while lanes are locked
                        log.error(
                            "action=outbox_mark_mismatch relay=%s acked=%d marked=%d",
                            self.name,
                            len(sent.acked),
                            marked,
                        )
        except BaseException as exc:
            if isinstance(exc, PublishTimeout):
                log.warning(
                    "action=outbox_publish_timeout relay=%s lanes=%d rows=%d timeout=%s",
                    self.name,
                    len(lanes),
                    len(rows),
                    self.config.in_doubt_timeout,
                )
            if isinstance(exc, PublishTimeout) or any(not f.done() for f in inflight):
                # Its rows go out again: nothing this producer still holds may land later.
                why = "publish_timeout" if isinstance(exc, PublishTimeout) else "pass_failed"
                if isinstance(exc, Exception):
                    await self._producers.replace(producer, why, None, abort=True)
                else:  # cancelled (a stop): do not hold the cancellation up
                    self._producers.retire(producer, why, None, abort=True)
            raise
        # Committed: the rows are published (or parked) for good.
        self._observe(sent.acked, published_at)
        until = self._clock.monotonic() + self.config.publish_timeout
        for topic, error in sent.looked_up_unavailable.items():
            self._unavailable[topic] = (until, error)
        self._parking.forget([p.outbox_id for p in parks] + [r.id for r in sent.acked])
        # A lane whose only failed rows were parked is healthy again: the rest of it goes next.
        parked_ids = {p.outbox_id for p in parks}
        still_failed = {
            lane for lane, ids in sent.failed_ids.items() if any(i not in parked_ids for i in ids)
        }
        self._lanes.track(
            lanes,
            sent.refused_lanes & still_failed,
            sent.failed_lanes & still_failed,
            self._clock.monotonic(),
        )
        self._observe_parked(parks, rows)
        reason = producer_fault(producer)
        if reason is None and sent.producer_error is not None:
            reason = "fatal_error"
        if reason is not None:
            await self._producers.replace(producer, reason, sent.producer_error)
        result = RelayResult(
            lanes=len(lanes),
            published=len(sent.acked),
            failed=len(rows) - len(sent.acked),
            more=bool(parks) or self._more(lanes, rows, sent, per_lane, probing),
            producer_replaced=reason is not None,
            parked=len(parks),
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
            # Passes with a refused lane or a failed producer (failed passes count in _run).
            self._metrics.errors.inc()
        return result

    def _known_unavailable(self) -> dict[str, BaseException]:
        """Topics a pass found without metadata within the last ``publish_timeout``."""
        now = self._clock.monotonic()
        for topic in [t for t, (until, _) in self._unavailable.items() if until <= now]:
            del self._unavailable[topic]
        return {t: error for t, (_, error) in self._unavailable.items()}

    async def _park(self, conn: Connection, parks: Sequence[Park], parked_at: datetime) -> None:
        """Move ``parks`` out of their lanes (which this pass holds) to ops.outbox_parked."""
        requests = [repo.ParkRequest(p.outbox_id, p.reason, p.error, p.refusals) for p in parks]
        moved = await repo.parked_move(conn, requests, parked_at)
        if moved != len(parks):  # cannot happen while lanes are locked
            log.error(
                "action=outbox_park_mismatch relay=%s parks=%d moved=%d",
                self.name,
                len(parks),
                moved,
            )

    def _observe_parked(self, parks: Sequence[Park], rows: Sequence[repo.PendingRow]) -> None:
        topic_of = {r.id: r.topic for r in rows}
        for park in parks:
            self._metrics.parked_total.labels(
                topic=topic_of[park.outbox_id], reason=park.reason
            ).inc()
            log.error(
                "action=outbox_row_parked relay=%s outbox_id=%d topic=%s reason=%s error=%s "
                "refusals=%d",
                self.name,
                park.outbox_id,
                topic_of[park.outbox_id],
                park.reason,
                park.error,
                park.refusals,
            )

    def _in_doubt(self, lanes: Sequence[int], rows: Sequence[repo.PendingRow]) -> None:
        self._metrics.in_doubt.inc()
        log.warning(
            "action=outbox_publish_waiting relay=%s lanes=%d rows=%d after=%s",
            self.name,
            len(lanes),
            len(rows),
            self.config.publish_timeout,
        )

    def _more(
        self,
        lanes: Sequence[int],
        rows: Sequence[repo.PendingRow],
        sent: Sent,
        per_lane: int,
        probing: set[int],
    ) -> bool:
        """May some lane hold more rows? A full lane, a probe that went through (the rest of
        its lane follows), or every lane slot taken (other lanes may be waiting)."""
        per_lane_rows = Counter(r.lane for r in rows)
        if any(
            lane not in sent.failed_lanes and (n >= per_lane or lane in probing)
            for lane, n in per_lane_rows.items()
        ):
            return True
        return (
            self.config.max_lanes_per_pass < repo.LANES
            and len(lanes) == self.config.max_lanes_per_pass
        )

    async def refresh_metrics(self) -> repo.Backlog:
        """Set the backlog and oldest-unpublished-age gauges from the database."""
        pool = self._opened()
        async with connection(pool) as conn:
            backlog = await repo.backlog_get(conn)
            parked = await repo.parked_stats(conn)
        self._metrics.backlog.set(backlog.count)
        self._metrics.parked.set(sum(s.parked for s in parked))
        age = 0.0
        if backlog.oldest_created_at is not None:
            age = max(0.0, (self._clock.now() - backlog.oldest_created_at).total_seconds())
        self._metrics.oldest_age.set(age)
        return backlog

    def _observe(self, acked: Sequence[repo.PendingRow], published_at: datetime) -> None:
        for topic, count in Counter(r.topic for r in acked).items():
            self._metrics.published.labels(topic=topic).inc(count)
        for row in acked:
            self._metrics.lag.observe(max(0.0, (published_at - row.created_at).total_seconds()))

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
                    describe(exc),
                )
                await wait_any(self._stopping, within=self._lanes.backoff(failures))
                continue
            if result.producer_replaced:
                failures += 1
                await wait_any(self._stopping, within=self._lanes.backoff(failures))
                continue
            failures = 0
            await self._refresh_metrics_if_due()
            if result.more or self._wake.is_set():
                continue
            self._idle.set()
            await wait_any(self._wake, self._stopping, within=self.config.poll_interval)

    async def _refresh_metrics_if_due(self) -> None:
        now = self._clock.monotonic()
        if now < self._metrics_due:
            return
        self._metrics_due = now + self.config.metrics_interval
        try:
            await self.refresh_metrics()
        except Exception as exc:
            log.warning("action=outbox_metrics_failed relay=%s error=%s", self.name, describe(exc))
