"""One trace from a calendar input to its reminder's output record, on real PostgreSQL (SDK
in-memory exporter): the input's trace context is kept on the event, and the dispatch run's
``calendar.reminder.send`` span continues it, linked to the run's batch."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from devkit.harness.calendar import outbox
from devkit.harness.timer_fakes import InMemoryTimerStore
from devkit.messages.factories import calendar_event, parsed
from devkit.tracing import named, recording, traceparent_of
from streams import tracing
from streams.clock import ManualClock
from streams.input.consumer import Decoded
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.calendar.dispatch import CalendarReminderDispatcher
from streams.slices.calendar.events import CalendarEventsApplier
from streams.timers import Mode, Schedule, TimerRegistry

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TOPIC = "pin.calendar.events.v1"
# Two producers' contexts (trace, span): the batch's span continues the first.
PRODUCER = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
OTHER = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")


def traceparent(ids: tuple[str, str]) -> str:
    return f"00-{ids[0]}-{ids[1]}-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with recording() as exporter:
        yield exporter


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = Runtime(Settings(database_url=database_url), clock=ManualClock(T0))
    yield rt
    await rt.close()


def record(message: dict[str, Any], offset: int, tp: str | None) -> Decoded[Any]:
    """A decoded input record as the events agent hands it over (partition, offset, headers)."""
    headers = [("traceparent", tp.encode("ascii"))] if tp is not None else []
    event = SimpleNamespace(message=SimpleNamespace(partition=0, offset=offset, headers=headers))
    return Decoded(event, parsed(message))  # type: ignore[arg-type]


async def ingest(runtime: Runtime, *records: Decoded[Any]) -> None:
    """One input batch through the calendar applier, inside the agent's input span."""
    with tracing.input_span(TOPIC, [r.event for r in records]):
        await CalendarEventsApplier(runtime)(list(records))


async def dispatch(runtime: Runtime, at: datetime) -> str:
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    registry = TimerRegistry(store=InMemoryTimerStore(), clock=clock, environ={})
    registry.register(
        Schedule(
            name="calendar-dispatch",
            interval=timedelta(seconds=60),
            handler=CalendarReminderDispatcher(runtime),
            max_duration=timedelta(seconds=30),
            mode=Mode.EVERY_INSTANCE,
        )
    )
    clock.set(at)
    run = await registry.run_slot("calendar-dispatch")
    assert run.result == "ok"
    return run.run_id


async def stored(pool: asyncpg.Pool, event_id: str) -> str | None:
    value: str | None = await pool.fetchval(
        "SELECT source_traceparent FROM calendar.events WHERE event_id = $1::uuid", event_id
    )
    return value


def payload(row: asyncpg.Record) -> dict[str, Any]:
    value = row["payload"]
    out: dict[str, Any] = json.loads(value) if isinstance(value, str | bytes) else value
    return out


def event(**overrides: Any) -> dict[str, Any]:
    return calendar_event(
        StartAt=T0 + timedelta(minutes=20), ReminderOffsetsMinutes=[15], **overrides
    )


async def test_the_reminders_output_record_continues_the_inputs_trace(
    runtime: Runtime, pool: asyncpg.Pool, spans: InMemorySpanExporter
) -> None:
    first, second, untraced = event(), event(), event()
    await ingest(
        runtime,
        record(first, 1, traceparent(PRODUCER)),
        record(second, 2, traceparent(OTHER)),
        record(untraced, 3, None),
    )
    [input_span] = named(spans.get_finished_spans(), f"input.batch {TOPIC}")
    assert f"{input_span.context.trace_id:032x}" == PRODUCER[0]
    # The record the batch's span continued keeps that span's context; one of another trace
    # (linked by the batch) keeps its own; one without a traceparent keeps nothing.
    assert await stored(pool, first["EventId"]) == traceparent_of(input_span)
    assert await stored(pool, second["EventId"]) == traceparent(OTHER)
    assert await stored(pool, untraced["EventId"]) is None
    spans.clear()

    run_id = await dispatch(runtime, T0 + timedelta(minutes=6))
    finished = spans.get_finished_spans()
    [batch] = named(finished, "calendar.dispatch.batch")
    sends = {
        str((s.attributes or {})["eventId"]): s for s in named(finished, "calendar.reminder.send")
    }
    assert set(sends) == {first["EventId"], second["EventId"]}
    rows = {payload(r)["EventId"]: r for r in await outbox(pool)}
    assert len(rows) == 3

    send = sends[first["EventId"]]
    assert send.context.trace_id == input_span.context.trace_id
    assert send.parent is not None and send.parent.span_id == input_span.context.span_id
    assert [link.context.span_id for link in send.links] == [batch.context.span_id]
    assert [link.context.trace_id for link in send.links] == [batch.context.trace_id]
    assert rows[first["EventId"]]["headers"]["traceparent"] == traceparent_of(send)
    assert rows[first["EventId"]]["headers"]["correlation-id"] == run_id
    attrs = dict(send.attributes or {})
    assert attrs == {
        "reminderId": payload(rows[first["EventId"]])["ReminderId"],
        "eventId": first["EventId"],
        "offsetMinutes": 15,
        "tenantId": first["TenantId"],
    }

    other: ReadableSpan = sends[second["EventId"]]
    assert f"{other.context.trace_id:032x}" == OTHER[0]
    assert other.parent is not None and f"{other.parent.span_id:016x}" == OTHER[1]
    assert rows[second["EventId"]]["headers"]["traceparent"] == traceparent_of(other)

    # No stored context: today's behaviour, the record under the batch's span.
    assert rows[untraced["EventId"]]["headers"]["traceparent"] == traceparent_of(batch)


async def test_tracing_off_keeps_no_context_and_writes_headers_as_before(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    assert not tracing.enabled()
    message = event()
    await ingest(runtime, record(message, 1, traceparent(PRODUCER)))
    assert await stored(pool, message["EventId"]) is None
    await dispatch(runtime, T0 + timedelta(minutes=6))
    [row] = await outbox(pool)
    assert set(row["headers"]) == {"correlation-id", "contract-version", "event-type"}


async def test_a_context_kept_while_tracing_was_on_is_not_written_once_it_is_off(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    message = event()
    with recording():
        await ingest(runtime, record(message, 1, traceparent(PRODUCER)))
    assert await stored(pool, message["EventId"]) is not None
    await dispatch(runtime, T0 + timedelta(minutes=6))
    [row] = await outbox(pool)
    assert set(row["headers"]) == {"correlation-id", "contract-version", "event-type"}


async def test_a_newer_state_without_a_traceparent_replaces_the_kept_context(
    runtime: Runtime, pool: asyncpg.Pool, spans: InMemorySpanExporter
) -> None:
    message = event()
    await ingest(runtime, record(message, 1, traceparent(PRODUCER)))
    assert await stored(pool, message["EventId"]) is not None
    newer = {**message, "Version": message["Version"] + 1, "ReminderOffsetsMinutes": [10]}
    await ingest(runtime, record(newer, 2, None))
    assert await stored(pool, message["EventId"]) is None
