"""The Faust app, built once per process from settings: topics, agents, tables, services, web."""

from __future__ import annotations

import faust
from mode import Service

from streams.agents import calendar_events
from streams.runtime import Runtime
from streams.settings import Settings
from streams.topics import Topics
from streams.web import views


class WorkerServices(Service):
    """Background parts of a worker that are not agents; closes the database pool last."""

    def __init__(self, runtime: Runtime, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.runtime = runtime

    async def on_stop(self) -> None:
        await self.runtime.close()


def create_app(settings: Settings, runtime: Runtime | None = None) -> faust.App:
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
    topics = Topics(app, settings)
    calendar_events.register(app, runtime, topics)
    views.register(app, runtime)
    app.service(WorkerServices(runtime))  # type: ignore[arg-type]
    app.runtime = runtime  # type: ignore[attr-defined]
    return app
