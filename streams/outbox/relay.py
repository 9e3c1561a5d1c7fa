"""The outbox relay: publishes committed outbox rows to Kafka at-least-once, in order per key.

This module holds the relay's lifecycle (``open``/``start``/``stop``), its background loop
(NOTIFY-driven with a polling fallback, backing off after a failed pass) and the backlog
gauges. What one pass does, and what it does when Kafka refuses, fails or does not answer,
is in streams/outbox/relay_pass.py.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import db.outbox as repo
from db.connector import SessionLimits, connection, create_pool
from streams import logs
from streams.asynctools import describe, wait_any
from streams.clock import Clock, SystemClock
from streams.kafka_client import security_options
from streams.metrics import OutboxMetrics
from streams.outbox.config import RelayConfig, RelayNotOpen, RelayResult
from streams.outbox.gauges import GaugeSchedule
from streams.outbox.lanes import LaneCooldown
from streams.outbox.limits import topics_below_limit
from streams.outbox.listener import NotifyListener, jittered
from streams.outbox.parking import ParkPolicy
from streams.outbox.producer import (
    ProducerFactory,
    ProducerSlot,
    ProducerUnavailable,
    kafka_producer_factory,
)
from streams.outbox.relay_pass import RelayPass
from streams.settings import Settings

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
        self._pass = RelayPass(
            name=self.name,
            config=self.config,
            metrics=metrics,
            clock=self._clock,
            producers=self._producers,
            lanes=self._lanes,
            parking=ParkPolicy(self.config.park_topic_wait),
        )
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._idle = asyncio.Event()
        self._listener = NotifyListener(
            dsn,
            self._wake,
            check_interval=self.config.listener_check_interval,
            backoff=self._lanes.backoff,
            name=self.name,
            probe_interval=self.config.probe_interval,
        )
        self._task: asyncio.Task[None] | None = None
        self._listener_task: asyncio.Task[None] | None = None
        self._gauges = GaugeSchedule(self.config.metrics_interval)
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
            logs.event(
                log,
                logging.WARNING,
                "outbox_relay_start_without_kafka",
                relay=self.name,
                error=describe(exc),
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
        logs.event(
            log,
            logging.INFO,
            "outbox_relay_start",
            relay=self.name,
            batch_size=self.config.batch_size,
            poll_interval=self.config.poll_interval,
            max_lanes_per_pass=self.config.max_lanes_per_pass,
            publish_timeout=self.config.publish_timeout,
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
                logs.event(log, logging.WARNING, "outbox_relay_stop_timeout", relay=self.name)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            except Exception as exc:
                logs.event(
                    log, logging.ERROR, "outbox_relay_crashed", relay=self.name, error=describe(exc)
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
        logs.event(log, logging.INFO, "outbox_relay_stop", relay=self.name)

    # ------------------------------------------------------------------ one pass

    async def run_once(self) -> RelayResult:
        """One pass over up to ``max_lanes_per_pass`` lanes that have work and are not held by
        another relay. Raises ``PublishTimeout`` (rolled back) when Kafka does not answer in
        time and ``ProducerUnavailable`` when no producer can be started."""
        return await self._pass.run(self._opened())

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
            self._listener.reconnected.clear()
            try:
                result = await self.run_once()
            except Exception as exc:
                failures += 1
                self._metrics.errors.inc()
                logs.event(
                    log,
                    logging.WARNING,
                    "outbox_pass_failed",
                    relay=self.name,
                    attempt=failures,
                    error=describe(exc),
                )
                await self._back_off(failures)
                continue
            if result.producer_replaced:
                failures += 1
                await self._back_off(failures)
                continue
            failures = 0
            await self._refresh_metrics_if_due()
            if result.more or self._wake.is_set():
                continue
            self._idle.set()
            await wait_any(self._wake, self._stopping, within=self.config.poll_interval)

    async def _back_off(self, failures: int) -> None:
        """Wait after the ``failures``-th failed pass in a row: the backoff (doubling, capped
        at ``max_backoff``, jittered), cut short when the LISTEN connection reconnects - the
        database is back. The listener checks its connection at once, so a database that
        went away is noticed now, and from then on probed every ``probe_interval``."""
        self._listener.check_now.set()
        delay = jittered(self._lanes.backoff(failures))
        await wait_any(self._stopping, self._listener.reconnected, within=delay)

    async def _refresh_metrics_if_due(self) -> None:
        started = self._clock.monotonic()
        if not self._gauges.due(started):
            return
        try:
            await self.refresh_metrics()
        except Exception as exc:
            logs.event(
                log, logging.WARNING, "outbox_metrics_failed", relay=self.name, error=describe(exc)
            )
        finally:
            self._gauges.read(started, self._clock.monotonic())
