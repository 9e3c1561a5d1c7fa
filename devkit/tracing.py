"""Tracing in tests and benches: an SDK provider with an in-memory exporter, installed for a block."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from streams import tracing


@contextmanager
def recording() -> Iterator[InMemorySpanExporter]:
    """Tracing on for the block, every ended span kept by the exporter yielded."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.uninstall()
        provider.shutdown()


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def traceparent_of(span: ReadableSpan) -> str:
    """The W3C traceparent a record written under ``span`` carries."""
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def everything_recorded(spans: Sequence[ReadableSpan]) -> str:
    """Every name, attribute, event and status text of ``spans`` as one string (PII checks)."""
    out: list[Any] = []
    for s in spans:
        out.append(s.name)
        out.append(dict(s.attributes or {}))
        out.append(s.status.description)
        for e in s.events:
            out.append([e.name, dict(e.attributes or {})])
        out.append(dict(s.resource.attributes))
    return json.dumps(out, default=str)
