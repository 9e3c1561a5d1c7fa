"""CPU cost of tracing per item: the disabled path (the default) and the enabled one.

``python -m bench.tracing [--items N] [--batch B]``: builds N ReminderDueEvent outbox records
with ``record_for`` (what dispatch does per row) in batches of B, each batch inside a
``tracing.span`` as dispatch's batch span; builds the same records through dispatch's
``reminder_record`` for rows whose event kept its input's trace context (on: one
``calendar.reminder.send`` span per row, parented by that context and linked to the batch);
and runs the input batch span (``input_span``)
over N records carrying a traceparent in batches of B. Once with tracing off (no SDK provider,
the default) and once on (the SDK's provider with a batching processor and an exporter that
drops what it gets: the cost in the service's process, not the collector's). Prints
microseconds of CPU per item for each, and the difference. A micro-benchmark of the tracing
path only (no PostgreSQL, no Kafka).
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from db.event_reminders import ClaimedReminder
from streams import tracing
from streams.contracts import REMINDER_DUE
from streams.contracts.calendar import ReminderDueEvent
from streams.outbox.records import record_for
from streams.slices.calendar.dispatch import record_maker, reminder_record


class Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def messages(n: int) -> list[ReminderDueEvent]:
    start = datetime.now(UTC) + timedelta(hours=1)
    return [
        ReminderDueEvent(
            reminder_id=uuid.uuid4(),
            event_id=uuid.uuid4(),
            tenant_id=uuid.uuid4(),
            owner_user_id=uuid.uuid4(),
            kind="Appointment",
            start_at=start,
            time_zone="Europe/Moscow",
            offset_minutes=15,
        )
        for _ in range(n)
    ]


def records(items: list[ReminderDueEvent], batch: int) -> float:
    """CPU seconds to build every record, a batch span around each batch."""
    began = time.process_time()
    for at in range(0, len(items), batch):
        with tracing.span("calendar.dispatch.batch", run_id="r") as span:
            for message in items[at : at + batch]:
                record_for(REMINDER_DUE, message, headers={"correlation-id": "r"})
            tracing.annotate(span, **{"batch.size": batch})
    return time.process_time() - began


def claimed(items: list[ReminderDueEvent]) -> list[ClaimedReminder]:
    """Claimed rows of those events, each with a stored input traceparent of its own."""
    return [
        ClaimedReminder(
            reminder_id=m.reminder_id,
            event_id=m.event_id,
            offset_minutes=m.offset_minutes,
            due_at=m.start_at - timedelta(minutes=m.offset_minutes),
            attempts=0,
            tenant_id=m.tenant_id,
            owner_user_id=m.owner_user_id,
            client_user_id=None,
            kind=m.kind,
            start_at=m.start_at,
            time_zone=m.time_zone,
            event_status="Planned",
            appointment_id=None,
            source_traceparent=f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01",
        )
        for m in items
    ]


def sends(rows: list[ClaimedReminder], batch: int) -> float:
    """CPU seconds to build every row's record through dispatch's path, a batch span around
    each batch (on: a send span per row continuing its stored context)."""
    began = time.process_time()
    make = record_maker("r", "")
    for at in range(0, len(rows), batch):
        with tracing.span("calendar.dispatch.batch", run_id="r"):
            for row in rows[at : at + batch]:
                reminder_record(row, make)
    return time.process_time() - began


def inputs(events: list[Any], batch: int) -> float:
    """CPU seconds to open and close the input batch span of every batch."""
    began = time.process_time()
    for at in range(0, len(events), batch):
        with tracing.input_span("pin.calendar.events.v1", events[at : at + batch]):
            pass
    return time.process_time() - began


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing")
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args(argv)
    items = messages(args.items)
    parent = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01".encode()
    events = [
        SimpleNamespace(message=SimpleNamespace(partition=i % 4, headers=[("traceparent", parent)]))
        for i in range(args.items)
    ]
    rows = claimed(items)
    records(items[:1000], args.batch)  # warm-up
    off = (records(items, args.batch), inputs(events, args.batch), sends(rows, args.batch))
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop(), max_queue_size=65536))
    tracing.install(provider)
    try:
        on = (records(items, args.batch), inputs(events, args.batch), sends(rows, args.batch))
    finally:
        tracing.uninstall()
        provider.shutdown()
    n = args.items
    print(f"tracing cost per item ({n} items, batches of {args.batch}; CPU microseconds)")
    print(f"  {'path':<42}{'off':>10}{'on':>10}{'on - off':>10}")
    for label, a, b in (
        ("outbox record built in a batch span", off[0], on[0]),
        ("input batch span (traceparent per record)", off[1], on[1]),
        ("reminder record in its input's trace", off[2], on[2]),
    ):
        print(f"  {label:<42}{a / n * 1e6:>10.2f}{b / n * 1e6:>10.2f}{(b - a) / n * 1e6:>10.2f}")


if __name__ == "__main__":
    main()
