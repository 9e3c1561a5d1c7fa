"""Tracing with OpenTelemetry: one set-up per process, hand-made spans, W3C trace context on Kafka.

Off by default: until ``configure`` finds ``OTEL_TRACES_EXPORTER`` set (streams/tracing/config.py)
no SDK provider exists, ``span`` returns one shared null context and ``headers`` an empty dict,
so a record's headers stay byte-identical to an untraced build (``bench/tracing.py`` measures
both paths). On, every span of the process goes to a batching exporter (a thread; the SDK
flushes it at exit).

The spans are hand-made, not the asyncpg / aiokafka / aiohttp instrumentations: those make a
span per statement, per produced record and per HTTP request (the relay alone sends thousands
of records a second, each then a span), the asyncpg one records statement text, and the
aiokafka one wraps Faust's private consumer loop; the service's units of work are a timer run,
a batch, an owner, an input batch and a relay pass, which is what an operator follows.

No PII: attributes are identifiers and counts only (schedule, slot, run id, topic, partition,
OwnerUserId, sizes), and an exception becomes a status with ``streams.errors.describe`` (the
class and SQLSTATE, never the message, which may quote a value) and no exception event.

Propagation: ``traceparent`` / ``tracestate`` (W3C, the tracecontext propagator alone, no
baggage) are read from an input record's headers (``input_span``) and written from the span
current when an outbox record is built (``headers``, called by ``record_for``), so the relay
copies the writer's context to the output topic unchanged.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from streams import logs
from streams.tracing.config import TracingConfig, TracingConfigError, from_env, problems

__all__ = [
    "TracingConfig",
    "TracingConfigError",
    "configure",
    "continued",
    "enabled",
    "headers",
    "input_span",
    "install",
    "kafka_headers",
    "links_of",
    "problems",
    "span",
    "stored_traceparent",
    "uninstall",
]

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
# Links an input batch or relay pass keeps to the other traces it carries (the SDK caps a span
# at 128 links).
MAX_LINKS = 64

# The one form a stored traceparent has (version 00, lower-case hex, 55 characters).
_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")

_PROPAGATOR = TraceContextTextMapPropagator()
# stored_traceparent's last ((incoming traceparent, current span id), answer).
_last_stored: tuple[tuple[str, int], str | None] | None = None
_NULL: AbstractContextManager[None] = nullcontext()
_tracer: Tracer | None = None
_provider: Any = None


def enabled() -> bool:
    return _tracer is not None


def configure(process: str, env: Mapping[str, str] | None = None) -> bool:
    """Set tracing up for this process from ``env`` (the process's environment): the SDK's
    provider with the exporters asked for, the global provider too. Returns whether tracing is
    on; raises TracingConfigError for a bad OTEL_* value (``load_settings`` checks them first)."""
    config = from_env(os.environ if env is None else env)
    if not config.enabled or _tracer is not None:
        return enabled()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(
        resource=Resource.create(
            {
                "service.name": config.service_name,
                "service.namespace": "reminders",
                "process": process,
            }
        )
    )
    for name in config.exporters:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)
    install(provider)
    return True


def install(provider: Any) -> None:
    """Trace on ``provider`` (an SDK TracerProvider; tests give one with an in-memory exporter)."""
    global _tracer, _provider
    _provider = provider
    _tracer = provider.get_tracer("streams")


def uninstall() -> None:
    """Tracing off again (tests); spans already started end as usual."""
    global _tracer, _provider
    _tracer, _provider = None, None


def flush(timeout_millis: int = 5000) -> None:
    """Export what the batching processors hold (before a process exits on its own)."""
    if _provider is not None:
        _provider.force_flush(timeout_millis)


def _attrs(fields: Mapping[str, object]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, bool | int | float | str):
            out[key] = value
        elif isinstance(value, list | tuple):
            out[key] = list(value)
        elif isinstance(value, datetime):
            out[key] = value.isoformat()
        else:
            out[key] = str(value)  # datetimes, UUIDs: identifiers, as text
    return out


def span(
    name: str,
    *,
    parent: Context | None = None,
    links: Sequence[Link] = (),
    kind: SpanKind = SpanKind.INTERNAL,
    **attributes: object,
) -> AbstractContextManager[Span | None]:
    """A span current for the ``with`` block (None when tracing is off: one shared null
    context, nothing built). An exception ends it with status error (described value-free)."""
    if _tracer is None:
        return _NULL
    return _span(_tracer, name, parent, links, kind, attributes)


@contextmanager
def _span(
    tracer: Tracer,
    name: str,
    parent: Context | None,
    links: Sequence[Link],
    kind: SpanKind,
    attributes: Mapping[str, object],
) -> Iterator[Span]:
    current = tracer.start_span(
        name, context=parent, kind=kind, attributes=_attrs(attributes), links=links
    )
    token = logs.TRACE_ID.set(trace.format_trace_id(current.get_span_context().trace_id))
    try:
        with trace.use_span(
            current, end_on_exit=True, record_exception=False, set_status_on_exception=False
        ):
            try:
                yield current
            except BaseException as exc:
                fail(current, exc)
                raise
    finally:
        logs.TRACE_ID.reset(token)


def start(
    name: str,
    *,
    links: Sequence[Link] = (),
    kind: SpanKind = SpanKind.INTERNAL,
    **attributes: object,
) -> Span | None:
    """A span that is not made current (ended by ``end``): for code that cannot wrap a block."""
    if _tracer is None:
        return None
    return _tracer.start_span(name, kind=kind, attributes=_attrs(attributes), links=links)


def end(current: Span | None, **attributes: object) -> None:
    """Set ``attributes`` on ``current`` and end it (nothing when tracing is off)."""
    if current is None:
        return
    current.set_attributes(_attrs(attributes))
    current.end()


def annotate(current: Span | None, **attributes: object) -> None:
    """Set ``attributes`` (identifiers, counts) on ``current`` when it records."""
    if current is not None and current.is_recording():
        current.set_attributes(_attrs(attributes))


def fail(current: Span | None, exc: BaseException) -> None:
    """Status error with the value-free description of ``exc`` (a cancellation is not an error)."""
    if current is None or not current.is_recording():
        return
    import asyncio

    from streams.errors import describe

    if isinstance(exc, asyncio.CancelledError):
        current.set_attribute("cancelled", True)
        return
    current.set_attribute("error.type", type(exc).__name__)
    current.set_status(Status(StatusCode.ERROR, describe(exc)))


def headers() -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) of the current span for a record being written;
    empty when tracing is off or no span is current."""
    if _tracer is None:
        return {}
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier


def headers_of(span_: Span | None) -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) naming ``span_`` (one ``start`` made, not
    current); empty when tracing is off."""
    if _tracer is None or span_ is None:
        return {}
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span_))
    return carrier


def kafka_headers() -> list[tuple[str, bytes]]:
    """``headers()`` as Kafka record headers."""
    return [(k, v.encode("ascii")) for k, v in headers().items()]


def _carrier(raw: object) -> dict[str, str] | None:
    """traceparent/tracestate of record headers (a mapping or (name, value) pairs)."""
    if not raw:
        return None
    pairs: Iterable[Any] = raw.items() if isinstance(raw, Mapping) else raw  # type: ignore[assignment]
    out: dict[str, str] = {}
    for pair in pairs:
        try:
            name, value = pair
        except (TypeError, ValueError):
            continue
        if isinstance(name, bytes):
            name = name.decode("ascii", "replace")
        if name not in (TRACEPARENT, TRACESTATE):
            continue
        if isinstance(value, bytes):
            value = value.decode("ascii", "replace")
        if isinstance(value, str):
            out[name] = value
    return out if TRACEPARENT in out else None


def context_of(raw_headers: object) -> Context | None:
    """The remote context ``raw_headers`` carry (None without a valid traceparent)."""
    carrier = _carrier(raw_headers)
    if carrier is None:
        return None
    ctx = _PROPAGATOR.extract(carrier)
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None
    return ctx


def links_of(all_headers: Iterable[object], *, skip: Context | None = None) -> list[Link]:
    """Links to the distinct contexts ``all_headers`` carry (at most MAX_LINKS): a traceparent
    seen before is not parsed again (a batch's records often share one)."""
    if _tracer is None:
        return []
    skipped = trace.get_current_span(skip).get_span_context() if skip is not None else None
    seen: set[str] = set()
    out: list[Link] = []
    for raw in all_headers:
        carrier = _carrier(raw)
        if carrier is None:
            continue
        key = carrier[TRACEPARENT]
        if key in seen:
            continue
        seen.add(key)
        sc = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
        if not sc.is_valid or (skipped is not None and sc.span_id == skipped.span_id):
            continue
        out.append(Link(sc))
        if len(out) >= MAX_LINKS:
            break
    return out


def input_span(
    label: str, events: Sequence[Any], **attributes: object
) -> AbstractContextManager[Span | None]:
    """The span of one input batch of an agent (topic, partitions, count): a child of the first
    record's incoming ``traceparent`` (the trace continues), linked to the others' traces."""
    if _tracer is None:
        return _NULL
    raw = [getattr(getattr(e, "message", None), "headers", None) for e in events]
    parent = next((c for h in raw if (c := context_of(h)) is not None), None)
    partitions = sorted(
        {p for e in events if isinstance(p := getattr(e.message, "partition", None), int)}
    )
    return span(
        f"input.batch {label}",
        parent=parent,
        links=links_of(raw, skip=parent),
        kind=SpanKind.CONSUMER,
        **{
            "messaging.system": "kafka",
            "messaging.destination.name": label,
            "messaging.kafka.partitions": partitions,
            "messaging.batch.message_count": len(events),
        },
        **attributes,
    )


def _format(sc: trace.SpanContext) -> str:
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


def stored_traceparent(raw_headers: object) -> str | None:
    """The traceparent to keep with a state an input record stored, for the later work it
    causes (calendar dispatch): the current input span's when the record's own traceparent is
    the one that span continued (same trace), else the record's own (another trace the batch
    carried); None when tracing is off or the record has no valid one. Always the 55-character
    W3C form (checked here, before it is written)."""
    global _last_stored
    if _tracer is None:
        return None
    carrier = _carrier(raw_headers)
    if carrier is None:
        return None
    current = trace.get_current_span().get_span_context()
    # A batch's records mostly share one traceparent: the last answer is kept for it.
    key = (carrier[TRACEPARENT], current.span_id)
    if _last_stored is not None and _last_stored[0] == key:
        return _last_stored[1]
    sc = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    value: str | None = None
    if sc.is_valid:
        if current.is_valid and current.trace_id == sc.trace_id:
            sc = current
        formatted = _format(sc)
        value = formatted if _TRACEPARENT.fullmatch(formatted) else None
    _last_stored = (key, value)
    return value


def continued(
    name: str, traceparent: str | None, **attributes: object
) -> AbstractContextManager[Span | None]:
    """A span whose parent is a stored ``traceparent`` (an input's context kept in the ledger)
    and which links to the span current now (the batch doing the work): the work continues the
    input's trace. The shared null context when tracing is off or ``traceparent`` is not a
    valid stored one (the caller's current span stays current)."""
    if _tracer is None or traceparent is None or not _TRACEPARENT.fullmatch(traceparent):
        return _NULL
    parent = context_of({TRACEPARENT: traceparent})
    if parent is None:
        return _NULL
    here = trace.get_current_span().get_span_context()
    links = [Link(here)] if here.is_valid else []
    return _span(_tracer, name, parent, links, SpanKind.INTERNAL, attributes)
