"""The worker's Faust app, built once per process on the timer side (streams/timer_app.py).

It adds the shared services (the outbox relay or the timer process, web views) and every
slice's stream part, which adds its own topics, agents, tables, pages and status sections."""

from __future__ import annotations

import logging

import faust
from mode import Service

from streams import faust_compat, logs, slices
from streams.input.monitor import LeanMonitor
from streams.kafka_client import faust_credentials
from streams.maintenance.schedules import WORKER_HEARTBEAT
from streams.maintenance.status import retention_status
from streams.outbox.relay import OutboxRelay
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.context import SliceContext
from streams.slices.slice import install_streams
from streams.timer_app import create_timers
from streams.timer_process.supervisor import TimerProcess
from streams.timers.registry import TimerRegistry
from streams.topics import Topics
from streams.web import guard, views


class WorkerServices(Service):
    """Background parts of a worker that are not agents: the timer registry, and the timer
    process (isolated schedules and the outbox relay; or the relay here when the worker has
    none). Started once the app is up (tables recovered); the database pool closes last."""

    def __init__(self, ctx: SliceContext, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.ctx = ctx
        self.runtime: Runtime = ctx.runtime
        self.registry: TimerRegistry = ctx.registry
        self.relay: OutboxRelay | None = None

    async def on_start(self) -> None:
        # Faust's start-up spinner sets the root logger to DEBUG when the level is WARN or
        # above (faust/worker.py, _setup_spinner_handler): every library's debug call would
        # then build a record only for the handler to drop it. Back to the configured level.
        logging.root.setLevel(self.runtime.settings.log_level.upper())
        if self.ctx.timer_process is not None:
            # The relay and the isolated schedules run there (streams/timer_process); the
            # startup gate started it once PostgreSQL answered (this waits until it is ready).
            await self.ctx.timer_process.start()
        else:
            self.relay = OutboxRelay.from_settings(
                self.runtime.settings,
                metrics=self.runtime.metrics.outbox,
                pool=await self.runtime.pool(),
                clock=self.runtime.clock,
            )
            await self.relay.start()
        # The pool's opening reads the database's clock (Runtime, DatabaseClock): the
        # schedules' first horizon must be in the database's time, not this host's.
        await self.runtime.pool()
        await self.registry.start()
        # Announce this worker at once (other status pages list it), not at the next slot.
        self.registry.wake(WORKER_HEARTBEAT)
        for started in self.ctx.on_started:
            started()

    async def on_stop(self) -> None:
        for cache in self.ctx.caches:  # changelog records still queued behind commits
            await cache.flush()
        # Runs finish (or roll back) first, so their outbox rows are visible to the relay's
        # last pass; what it does not publish now, the next worker will.
        await self.registry.stop(timeout=20, cancel_grace=5)
        if self.ctx.timer_process is not None:
            await self.ctx.timer_process.stop()
        if self.relay is not None:
            await self.relay.stop()
        await self.runtime.close()


def create_context(
    settings: Settings, runtime: Runtime | None = None, *, worker_id: str | None = None
) -> SliceContext:
    """The app with every slice installed and the timer registry declared, not started (the
    worker starts it). The timers are those of ``create_timers``; the app adds the stream
    parts, given what each slice's timers returned."""
    timers = create_timers(settings, runtime, worker_id=worker_id)
    runtime = timers.runtime
    settings.worker_data_dir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,
        broker=f"kafka://{settings.kafka_bootstrap}",
        broker_credentials=faust_credentials(settings),
        store="rocksdb://",
        datadir=str(settings.worker_data_dir / f"{settings.app_id}-{settings.web_port}"),
        web_host=settings.web_host,
        web_port=settings.web_port,
        web_bind=settings.web_host,
        # Only the service's own views: Faust's (/router/, /table/, /graph/, stats, metrics)
        # would serve table contents and tracebacks past the gate's pages.
        web_router_enabled=False,
        web_tables_enabled=False,
        web_graph_enabled=False,
        web_stats_enabled=False,
        web_metrics_enabled=False,
        # The gate (read token, read pool and concurrency, body limits, security headers)
        # and the header timeout: streams/web/guard.py.
        web_application_options=guard.application_options(runtime),
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=settings.kafka_replication_factor,
        # KAFKA_DECLARE_INTERNAL_TOPICS=false: no CreateTopics from the worker (no Create ACL);
        # the changelogs come from `streams topics`, the leader topic is unused (no on_leader).
        topic_allow_declare=settings.kafka_declare_internal_topics,
        topic_disable_leader=not settings.kafka_declare_internal_topics,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        # Table changelog records come in bursts (a cache write per key after each commit):
        # a short linger sends them in batches instead of one request each (Faust's default
        # is 0). Outbox events have their own producer (streams/outbox/producer.py).
        producer_linger=0.01,
        producer_max_batch_size=256 * 1024,
        autodiscover=False,
        monitor=LeanMonitor(runtime.metrics.stream),
        # Offsets are committed only for acked (= committed to PostgreSQL) messages.
        broker_commit_every=1000,
        broker_commit_interval=1.0,
        # Group membership: how soon a dead worker's partitions move (docs/deploy.md).
        broker_session_timeout=settings.broker_session_timeout,
        broker_heartbeat_interval=settings.broker_heartbeat_interval,
        broker_rebalance_timeout=settings.broker_rebalance_timeout,
        table_standby_replicas=0,
        # The one logging set-up (streams/logs.py), applied when Faust's worker sets up logging.
        logging_config=logs.dict_config(
            settings.log_level, settings.log_format, levels=settings.log_levels
        ),
    )
    ctx = SliceContext(
        app,
        runtime,
        Topics(app, settings),
        timers.registry,
        status_sections=timers.status_sections,
        on_started=timers.on_started,
    )
    install_streams(slices.declared(), ctx, timers)
    ctx.status("retention", lambda: retention_status(runtime))
    return ctx


def create_app(settings: Settings, runtime: Runtime | None = None) -> faust.App:
    return create_worker(settings, runtime).app


def create_worker(settings: Settings, runtime: Runtime | None = None) -> SliceContext:
    """The worker's app and context (its timer process, if it has one, not started).
    Raises FaustCompatError when an internal of the installed faust-streaming, mode or
    aiokafka that the service relies on is missing or changed."""
    faust_compat.check()
    ctx = create_context(settings, runtime)
    if settings.worker_timer_process:
        registry = ctx.registry
        isolated = [name for name in registry.names if registry.get(name).isolated]
        ctx.timer_process = TimerProcess(
            ctx.runtime.metrics,
            registry.worker_id,
            isolated,
            stall_seconds=settings.worker_timer_process_stall_seconds,
            kill_after=settings.worker_timer_process_kill_seconds,
        )
        registry.delegate(isolated, ctx.timer_process.wake)
    views.register(ctx)
    ctx.app.service(WorkerServices(ctx))  # type: ignore[arg-type]
    return ctx
