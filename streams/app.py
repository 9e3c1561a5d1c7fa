"""The Faust app, built once per process from settings: topics, agents, tables, services, web."""

from __future__ import annotations

import faust
from mode import Service

from streams.agents import calendar_events
from streams.outbox.config import RelayConfig
from streams.outbox.relay import OutboxRelay
from streams.runtime import Runtime
from streams.settings import Settings
from streams.timers.jobs import CALENDAR_DISPATCH, build_registry, dispatch_waker
from streams.timers.registry import TimerRegistry
from streams.topics import Topics
from streams.web import views


class WorkerServices(Service):
    """Background parts of a worker that are not agents: the timer registry and the outbox
    relay. Started once the app is up (tables recovered); the database pool closes last."""

    def __init__(self, runtime: Runtime, registry: TimerRegistry, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.runtime = runtime
        self.registry = registry
        self.relay: OutboxRelay | None = None

    async def on_start(self) -> None:
        self.relay = OutboxRelay.from_settings(
            self.runtime.settings,
            metrics=self.runtime.metrics.outbox,
            pool=await self.runtime.pool(),
            clock=self.runtime.clock,
        )
        await self.relay.start()
        await self.registry.start()
        # A (re)started worker catches up on due reminders now, not at the next 60 s slot.
        self.registry.wake(CALENDAR_DISPATCH)

    async def on_stop(self) -> None:
        # Runs finish (or roll back) first, so their outbox rows are visible to the relay's
        # last pass; what it does not publish now, the next worker will.
        await self.registry.stop(timeout=20, cancel_grace=5)
        if self.relay is not None:
            await self.relay.stop()
        await self.runtime.close()


def create_app(settings: Settings, runtime: Runtime | None = None) -> faust.App:
    RelayConfig.from_settings(settings)  # relay settings that cannot work stop startup here
    runtime = runtime or Runtime(settings)
    settings.worker_data_dir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,
        broker=f"kafka://{settings.kafka_bootstrap}",
        store="rocksdb://",
        datadir=str(settings.worker_data_dir / f"{settings.app_id}-{settings.web_port}"),
        web_host=settings.web_host,
        web_port=settings.web_port,
        web_bind=settings.web_host,
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=1,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        autodiscover=False,
        # Offsets are committed only for acked (= committed to PostgreSQL) messages.
        broker_commit_every=1000,
        broker_commit_interval=1.0,
        table_standby_replicas=0,
        logging_config=None,
    )
    registry = build_registry(runtime)
    topics = Topics(app, settings)
    calendar = calendar_events.register(app, runtime, topics, on_due=dispatch_waker(registry))
    consumers = {"calendar-events": calendar.consumer} if calendar.consumer else {}
    views.register(
        app, runtime, registry, [c for c in [calendar.cache] if c is not None], consumers
    )
    app.service(WorkerServices(runtime, registry))  # type: ignore[arg-type]
    return app
