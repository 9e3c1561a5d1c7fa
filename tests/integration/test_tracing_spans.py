"""Spans on real PostgreSQL and Kafka (SDK in-memory exporter): a calendar dispatch run, a
document expiry run, the relay's pass; the traceparent on the outbox rows and Kafka records."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from devkit.harness.calendar import apply, outbox
from devkit.harness.outbox import backlog_at_most, new_relay, running, write
from devkit.harness.profile import CIPHER, MASK, SLOT, Harness, person_document
from devkit.harness.timer_fakes import InMemoryTimerStore
from devkit.kafka import create_topics, read_to_end
from devkit.messages.factories import calendar_event
from devkit.tracing import everything_recorded, named, recording, traceparent_of
from devkit.wait import eventually
from streams.clock import ManualClock
from streams.outbox import OutboxRecord
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.calendar.dispatch import CalendarReminderDispatcher
from streams.slices.calendar.events import CalendarEventsApplier
from streams.timers import Mode, Schedule, TimerRegistry

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with recording() as exporter:
        yield exporter


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = Runtime(Settings(database_url=database_url), clock=ManualClock(T0))
    yield rt
    await rt.close()


def registry_of(clock: ManualClock, schedule: Schedule) -> TimerRegistry:
    registry = TimerRegistry(store=InMemoryTimerStore(), clock=clock, environ={})
    registry.register(schedule)
    return registry


async def test_dispatch_run_span_has_its_batches_and_the_records_carry_the_batch_context(
    runtime: Runtime, pool: asyncpg.Pool, spans: InMemorySpanExporter
) -> None:
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    await apply(
        CalendarEventsApplier(runtime),
        calendar_event(StartAt=T0 + timedelta(minutes=20), ReminderOffsetsMinutes=[15, 10]),
    )
    dispatcher = CalendarReminderDispatcher(runtime)
    registry = registry_of(
        clock,
        Schedule(
            name="calendar-dispatch",
            interval=timedelta(seconds=60),
            handler=dispatcher,
            max_duration=timedelta(seconds=30),
            mode=Mode.EVERY_INSTANCE,
        ),
    )
    clock.set(T0 + timedelta(minutes=11))
    record = await registry.run_slot("calendar-dispatch")
    assert record.result == "ok"
    finished = spans.get_finished_spans()
    [run] = named(finished, "timer.run calendar-dispatch")
    batches = named(finished, "calendar.dispatch.batch")
    assert batches, [s.name for s in finished]
    attrs = dict(run.attributes or {})
    assert attrs["schedule"] == "calendar-dispatch"
    assert attrs["run_id"] == attrs["correlationId"] == record.run_id
    assert record.slot is not None and attrs["slot"] == record.slot.isoformat()
    assert attrs["run_kind"] == "manual"
    assert attrs["count.sent_count"] == 2
    assert run.parent is None
    for batch in batches:
        assert batch.parent is not None and batch.parent.span_id == run.context.span_id
        assert batch.context.trace_id == run.context.trace_id
    assert sum(int((b.attributes or {})["batch.size"]) for b in batches) == 2  # type: ignore[call-overload]
    rows = await outbox(pool)
    assert len(rows) == 2
    first = batches[0]
    for row in rows:
        assert row["headers"]["traceparent"] == traceparent_of(first)
        assert row["headers"]["correlation-id"] == record.run_id


async def test_dispatch_without_tracing_writes_no_traceparent(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    await apply(
        CalendarEventsApplier(runtime),
        calendar_event(StartAt=T0 + timedelta(minutes=20), ReminderOffsetsMinutes=[15]),
    )
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    registry = registry_of(
        clock,
        Schedule(
            name="calendar-dispatch",
            interval=timedelta(seconds=60),
            handler=CalendarReminderDispatcher(runtime),
            max_duration=timedelta(seconds=30),
            mode=Mode.EVERY_INSTANCE,
        ),
    )
    clock.set(T0 + timedelta(minutes=6))
    assert (await registry.run_slot("calendar-dispatch")).result == "ok"
    [row] = await outbox(pool)
    assert set(row["headers"]) == {"correlation-id", "contract-version", "event-type"}


async def test_document_expiry_run_span_has_a_span_per_owner_and_no_pii(
    database_url: str, pool: asyncpg.Pool, spans: InMemorySpanExporter
) -> None:
    h = Harness(database_url)
    try:
        owners = [uuid.uuid4(), uuid.uuid4()]
        await h.apply(
            *(person_document(OwnerUserId=str(o), DaysLeft=7) for o in owners),
            person_document(OwnerUserId=str(owners[0]), DaysLeft=1),
        )
        clock = h.runtime.clock
        assert isinstance(clock, ManualClock)
        registry = registry_of(
            clock,
            Schedule(
                name="document-expiry",
                interval=timedelta(days=1),
                handler=h.run(),
                max_duration=timedelta(seconds=60),
                mode=Mode.EVERY_INSTANCE,
            ),
        )
        record = await registry.run_slot("document-expiry", SLOT)
        assert record.result == "ok", record.error
    finally:
        await h.close()
    finished = spans.get_finished_spans()
    [run] = named(finished, "timer.run document-expiry")
    owner_spans = named(finished, "document_expiry.owner")
    assert {(s.attributes or {})["ownerUserId"] for s in owner_spans} == {str(o) for o in owners}
    for s in owner_spans:
        assert s.context.trace_id == run.context.trace_id
        assert (s.attributes or {})["correlationId"] == record.run_id
    assert dict(run.attributes or {})["count.owners_notified"] == 2
    rows = await pool.fetch("SELECT key, headers FROM ops.outbox")
    by_owner = {s.attributes["ownerUserId"]: s for s in owner_spans if s.attributes}
    assert len(rows) == 2
    for row in rows:
        headers = row["headers"]
        assert headers["traceparent"] == traceparent_of(by_owner[row["key"]])
    text = everything_recorded(finished)
    assert MASK not in text and CIPHER not in text


async def test_relay_copies_the_traceparent_to_the_kafka_record_unchanged(
    database_url: str,
    pool: asyncpg.Pool,
    kafka_bootstrap: str,
    topic_prefix: str,
    spans: InMemorySpanExporter,
) -> None:
    topic = f"{topic_prefix}trace.relay"
    await create_topics(kafka_bootstrap, [topic])
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    records = [
        OutboxRecord(topic, "k", '{"N": 1}', {"traceparent": parent, "tracestate": "rojo=1"}),
        OutboxRecord(topic, "k", '{"N": 2}', {"event-type": "Test"}),
    ]
    relay = new_relay(database_url, kafka_bootstrap)
    async with running(relay):
        await write(pool, records)
        await eventually(backlog_at_most(pool, 0), timeout=60, what="rows marked")
    received = await read_to_end(kafka_bootstrap, topic)
    assert len(received) == 2
    first, second = (dict(r.headers) for r in received)
    assert first["traceparent"] == parent.encode() and first["tracestate"] == b"rojo=1"
    assert "traceparent" not in second  # a row written without a span gets none
    passes = named(spans.get_finished_spans(), "outbox.relay.pass")
    assert passes
    linked = {link.context.trace_id for p in passes for link in p.links}
    assert 0x0AF7651916CD43DD8448EB211C80319C in linked
    assert sum(int((p.attributes or {})["published"]) for p in passes) == 2  # type: ignore[call-overload]
