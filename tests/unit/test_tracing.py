"""Tracing: the OTEL_* switch and its errors, the disabled path, and an input batch that
continues the incoming trace into the outbox record it writes (SDK in-memory exporter)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from devkit.tracing import named, recording, traceparent_of
from streams import logs, tracing
from streams.contracts import REMINDER_DUE, TopicContract
from streams.contracts.base import Contract
from streams.contracts.calendar import ReminderDueEvent
from streams.input.consumer import ContractConsumer, Decoded
from streams.metrics import AgentMetrics
from streams.outbox.records import OutboxRecord, record_for
from streams.settings import ConfigError, load_settings
from streams.tracing.config import from_env, problems

INCOMING = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OTHER = "00-11111111111111111111111111111111-2222222222222222-01"


class Item(Contract):
    n: int


CONTRACT = TopicContract("in", Item, lambda m: str(m.n), "in")


def test_off_by_default_and_when_the_sdk_is_disabled() -> None:
    assert not from_env({}).enabled
    assert not from_env({"OTEL_TRACES_EXPORTER": "none"}).enabled
    assert not from_env({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}).enabled
    on = from_env({"OTEL_TRACES_EXPORTER": "otlp,console", "OTEL_SERVICE_NAME": "svc"})
    assert on.exporters == ("otlp", "console") and on.service_name == "svc"
    assert from_env({"OTEL_TRACES_EXPORTER": "otlp"}).service_name == "reminders-stream"
    assert tracing.configure("test", {}) is False and not tracing.enabled()


@pytest.mark.parametrize(
    ("env", "named_setting"),
    [
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_TRACES_EXPORTER": "none,otlp"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_SDK_DISABLED": "yes"}, "OTEL_SDK_DISABLED"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://x"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ({"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"),
        ({"OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG"),
    ],
)
def test_a_bad_value_names_its_variable(env: dict[str, str], named_setting: str) -> None:
    [problem] = problems(env)
    assert named_setting in problem
    with pytest.raises(tracing.TracingConfigError, match=named_setting):
        from_env(env)


def test_a_bad_value_stops_startup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER"):
        load_settings()


def message() -> Any:
    return ReminderDueEvent.model_validate(
        {
            "ReminderId": "7d5c3a52-6f55-4a47-9d57-3c1f6b0f7c11",
            "EventId": "2c1c5fd2-2b8b-4e5a-9b1f-4f5c0b2c9a01",
            "TenantId": "a1d7c1f2-6a1e-4f0f-8a51-6b7f2f1d3e21",
            "OwnerUserId": "b2e8d2a3-7b2f-4a1a-9b62-7c8a3a2e4f32",
            "Kind": "Event",
            "StartAt": "2026-12-01T10:00:00+00:00",
            "TimeZone": "UTC",
            "OffsetMinutes": 15,
        }
    )


def test_disabled_path_builds_nothing_and_leaves_headers_as_they_were() -> None:
    assert not tracing.enabled()
    with tracing.span("x", a=1) as span:
        assert span is None
        assert tracing.headers() == {} and tracing.kafka_headers() == []
        record = record_for(REMINDER_DUE, message(), headers={"correlation-id": "r"})
    assert record.headers == {
        "correlation-id": "r",
        "contract-version": "1",
        "event-type": "ReminderDueEvent",
    }
    assert logs.TRACE_ID.get() is None


def test_a_span_sets_the_log_lines_trace_id_while_it_is_current() -> None:
    with recording() as exporter:
        with tracing.span("outer") as span:
            assert span is not None
            assert logs.TRACE_ID.get() == f"{span.get_span_context().trace_id:032x}"
            record = record_for(REMINDER_DUE, message())
        assert logs.TRACE_ID.get() is None
        [outer] = exporter.get_finished_spans()
    assert record.headers["traceparent"] == traceparent_of(outer)


class Msg:
    def __init__(self, offset: int, partition: int, headers: list[tuple[str, bytes]]) -> None:
        self.topic, self.partition, self.offset = "in", partition, offset
        self.key, self.value, self.headers = b"k", b'{"N": %d}' % offset, headers
        self.timestamp = None


def test_an_input_batch_continues_the_incoming_trace_into_the_record_it_writes() -> None:
    written: list[OutboxRecord] = []

    async def apply(batch: Sequence[Decoded[Item]]) -> None:
        written.extend(record_for(REMINDER_DUE, message()) for _ in batch)

    consumer = ContractConsumer(
        CONTRACT,
        apply,
        dlq=SimpleNamespace(),  # type: ignore[arg-type]
        metrics=AgentMetrics(CollectorRegistry()),
    )
    events = [
        SimpleNamespace(message=Msg(1, 0, [("traceparent", INCOMING.encode())])),
        SimpleNamespace(message=Msg(2, 3, [("traceparent", OTHER.encode())])),
        SimpleNamespace(message=Msg(3, 3, [])),
    ]
    with recording() as exporter:
        asyncio.run(consumer.handle(events))  # type: ignore[arg-type]
        [batch] = named(exporter.get_finished_spans(), "input.batch in")
    assert f"{batch.context.trace_id:032x}" == INCOMING.split("-")[1]
    assert batch.parent is not None and f"{batch.parent.span_id:016x}" == INCOMING.split("-")[2]
    assert batch.parent.is_remote
    assert [f"{link.context.trace_id:032x}" for link in batch.links] == [OTHER.split("-")[1]]
    attrs = dict(batch.attributes or {})
    assert attrs["messaging.destination.name"] == "in"
    assert list(attrs["messaging.kafka.partitions"]) == [0, 3]  # type: ignore[call-overload]
    assert attrs["messaging.batch.message_count"] == 3
    assert len(written) == 3
    for record in written:
        assert record.headers["traceparent"] == traceparent_of(batch)
        assert record.headers["traceparent"].split("-")[1] == INCOMING.split("-")[1]


def test_headers_of_a_record_without_a_valid_traceparent_start_a_new_trace() -> None:
    assert tracing.context_of([("traceparent", b"garbage")]) is None
    assert tracing.context_of({"traceparent": INCOMING}) is not None
    assert tracing.context_of(None) is None


def test_a_failure_is_a_value_free_error_status_without_an_exception_event() -> None:
    secret = "Key (number_mask)=(45** ****12) already exists"
    with recording() as exporter:
        with pytest.raises(ValueError), tracing.span("failing"):
            raise ValueError(secret)
        with pytest.raises(asyncio.CancelledError), tracing.span("cancelled"):
            raise asyncio.CancelledError
        failing, cancelled = exporter.get_finished_spans()
    assert failing.status.status_code.name == "ERROR"
    assert (failing.attributes or {})["error.type"] == "ValueError"
    assert not failing.events
    assert secret not in (failing.status.description or "") and "45**" not in str(failing.status)
    assert cancelled.status.status_code.name == "UNSET"
    assert (cancelled.attributes or {})["cancelled"] is True


def test_a_stored_traceparent_is_the_input_spans_for_its_own_trace_else_the_records() -> None:
    mine = [("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")]
    other = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    assert tracing.stored_traceparent(mine) is None  # off
    with recording() as exporter:
        events = [SimpleNamespace(message=SimpleNamespace(headers=mine, partition=0))]
        with tracing.input_span("t", events):
            assert tracing.stored_traceparent(other) == other["traceparent"]
            assert tracing.stored_traceparent({"traceparent": "00-zz-01"}) is None
            assert tracing.stored_traceparent([]) is None
            here = tracing.stored_traceparent(mine)
        [batch] = exporter.get_finished_spans()
        assert here == traceparent_of(batch)


def test_continued_has_the_stored_parent_and_links_the_current_span() -> None:
    stored = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert tracing.continued("x", stored) is tracing.continued("y", None)  # off: null context
    with recording() as exporter:
        with tracing.span("batch"):
            with tracing.continued("send", "not-a-traceparent") as none:
                assert none is None
            with tracing.continued("send", stored, reminderId="r") as span:
                assert span is not None
                assert tracing.headers()["traceparent"].split("-")[1] == stored.split("-")[1]
        send, batch = exporter.get_finished_spans()
        assert send.parent is not None and f"{send.parent.span_id:016x}" == "00f067aa0ba902b7"
        assert [link.context.span_id for link in send.links] == [batch.context.span_id]
        assert dict(send.attributes or {}) == {"reminderId": "r"}
