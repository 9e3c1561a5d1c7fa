"""A real worker with OTEL_TRACES_EXPORTER=otlp sends its spans to a real Jaeger (v2, built from
the Go module proxy by devkit/jaeger.py); the traces are read back through Jaeger's HTTP query
API: a calendar input record's traceparent continued by the agent's batch span and, once its
reminder comes due, by the dispatch run's ``calendar.reminder.send`` span, whose context the
reminder's output record carries; and one document expiry trace across both processes and
Kafka, from the timer run to the output record."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from devkit.harness.profile import Harness, person_document
from devkit.jaeger import JAEGER
from devkit.kafka import produce, read_to_end
from devkit.messages.factories import calendar_event, encode
from devkit.wait import eventually
from devkit.workers import WorkerProcess, free_port, worker_env
from streams.kafka_admin import ensure_topics, service_topic_names
from streams.settings import Settings

pytestmark = pytest.mark.e2e

EVENTS = "pin.calendar.events.v1"
REMINDERS = "pin.profile.document-expiry-reminders.v1"
REMINDER_DUE = "pin.calendar.reminder-due.v1"
# The calendar event's reminder comes due this long after it is sent (the worker's own clock:
# the dispatcher wakes at the DueAt the ingest reports).
DUE_IN = timedelta(seconds=5)
TRACE = "5b8efff798038103d269b633813fc60c"
PARENT = "eee19b7ec3c1b174"
MASK = "77** ****31"
CIPHER = "CIPHER-e2e-trace-9d1c"

CONFIG = """
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
"""


class Jaeger:
    """A Jaeger started on free ports, up once its query API answers and its OTLP receiver
    takes an (empty) export. A port picked free can be taken before Jaeger binds it (CI saw
    "bind: address already in use" for the OTLP receiver, and every span of the test was
    lost): Jaeger then exits, and it is started again on other ports."""

    ATTEMPTS = 3
    READY_WITHIN = 60.0

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.log = tmp / "jaeger.log"
        for attempt in range(1, self.ATTEMPTS + 1):
            if self._start(attempt):
                return
        raise RuntimeError(
            f"Jaeger did not start in {self.ATTEMPTS} attempts: {self.log.read_text()[-2000:]}"
        )

    def _start(self, attempt: int) -> bool:
        ports: list[int] = []
        while len(ports) < 3:  # three distinct ports: query, its gRPC, OTLP
            port = free_port()
            if port not in ports:
                ports.append(port)
        self.query, query_grpc, self.otlp = ports
        config = self.tmp / "jaeger.yaml"
        config.write_text(CONFIG.format(query=self.query, query_grpc=query_grpc, otlp=self.otlp))
        with self.log.open("ab") as out:
            out.write(f"--- attempt {attempt}: ports {ports}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [str(JAEGER), "--config", f"file:{config}"],
                cwd=self.tmp,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + self.READY_WITHIN
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False  # exited: a port was taken, try others
            if self.get("/api/services") is not None and _otlp_takes(self.otlp):
                return self.proc.poll() is None
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"Jaeger not serving within {self.READY_WITHIN:g}s: see {self.log}")

    def get(self, path: str) -> Any:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.query}{path}", timeout=5) as r:
                return json.loads(r.read())
        except OSError:
            return None

    def spans(self, trace_id: str) -> list[dict[str, Any]]:
        body = self.get(f"/api/traces/{trace_id}")
        if not body or not body.get("data"):
            return []
        return list(body["data"][0]["spans"])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _otlp_takes(port: int) -> bool:
    """An empty OTLP/HTTP export to ``port`` is accepted (Jaeger's receiver, not just anyone
    listening there)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces",
        data=b"{}",
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _built() -> None:
    if not JAEGER.is_file():
        reason = f"{JAEGER} is not built (python -m devkit.jaeger)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture
def jaeger(tmp_path: Path) -> Iterator[Jaeger]:
    _built()
    j = Jaeger(tmp_path)
    try:
        yield j
    finally:
        j.stop()


def test_jaeger_starts_again_on_other_ports_when_its_otlp_port_was_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The port race CI hit: the OTLP port picked free is taken before Jaeger binds it.
    Jaeger exits; the fixture must not hand out a Jaeger that loses every span."""
    _built()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        real = free_port
        picks = iter([real(), real(), busy])
        monkeypatch.setattr(sys.modules[__name__], "free_port", lambda: next(picks, None) or real())
        j = Jaeger(tmp_path)
        try:
            assert j.otlp != busy
            assert _otlp_takes(j.otlp)
            assert j.log.read_text().count("--- attempt") == 2, j.log.read_text()[-2000:]
        finally:
            j.stop()


def tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span["tags"]}


def parent_of(span: dict[str, Any]) -> str | None:
    refs = [r for r in span["references"] if r["refType"] == "CHILD_OF"]
    return refs[0]["spanID"] if refs else None


def one(spans: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    found = [s for s in spans if s["operationName"].startswith(prefix)]
    assert len(found) >= 1, [s["operationName"] for s in spans]
    return found[0]


@pytest.mark.timeout(300)  # jaeger + worker start 90 s, waits of 90 s, stop 30 s
async def test_worker_traces_reach_jaeger_and_the_output_record_carries_the_trace(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, jaeger: Jaeger
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix)
    await ensure_topics(settings, service_topic_names(settings))
    seed = Harness(database_url, now=datetime.now(UTC))
    owner_doc = person_document(
        ExpiresAt=datetime.now(UTC).date() + timedelta(days=7),
        NumberMask=MASK,
        PayloadCipher=CIPHER,
    )
    try:
        await seed.apply(owner_doc)
    finally:
        await seed.close()
    env = worker_env(
        database_url,
        kafka_bootstrap,
        topic_prefix,
        TIMER_DOCUMENT_EXPIRY_INTERVAL_SECONDS="2",
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{jaeger.otlp}",
        OTEL_SERVICE_NAME="reminders-stream-e2e",
        OTEL_BSP_SCHEDULE_DELAY="200",
    )
    worker = WorkerProcess(env, tmp_path, "traced").start()
    try:
        await worker.wait_ready()
        sent_at = datetime.now(UTC)
        event = calendar_event(
            StartAt=sent_at + timedelta(minutes=15) + DUE_IN,
            ReminderOffsetsMinutes=[15],
            OccurredAt=sent_at,
        )
        incoming = f"00-{TRACE}-{PARENT}-01".encode()
        await produce(
            kafka_bootstrap,
            topic_prefix + EVENTS,
            [(event["EventId"], encode(event), [("traceparent", incoming)])],
        )
        # The owner's event on the output topic, written under a span of the expiry trace.
        records = await eventually(
            lambda: read_to_end(kafka_bootstrap, topic_prefix + REMINDERS),
            until=lambda rs: len(rs) >= 1,
            timeout=90,
            what="the owner's expiry reminder published",
            interval=0.5,
        )
        headers = dict(records[0].headers)
        assert "traceparent" in headers, headers
        _, out_trace, out_span, _ = headers["traceparent"].decode().split("-")
        expiry = await eventually(
            lambda: asyncio.to_thread(jaeger.spans, out_trace),
            until=lambda spans: (
                {"timer.run", "input.batch", "document_expiry.owner"}
                <= {s["operationName"].split(" ")[0] for s in spans}
            ),
            timeout=60,
            what="the document expiry trace in Jaeger",
            interval=0.5,
        )
        # The reminder, dispatched by a timer run, on the output topic in the input's trace.
        due = await eventually(
            lambda: read_to_end(kafka_bootstrap, topic_prefix + REMINDER_DUE),
            until=lambda rs: any(json.loads(r.value)["EventId"] == event["EventId"] for r in rs),
            timeout=90,
            what="the calendar event's reminder published",
            interval=0.5,
        )
        [due_record] = [r for r in due if json.loads(r.value)["EventId"] == event["EventId"]]
        calendar = await eventually(
            lambda: asyncio.to_thread(jaeger.spans, TRACE),
            until=lambda spans: (
                {"input.batch", "calendar.reminder.send"}
                <= {s["operationName"].split(" ")[0] for s in spans}
            ),
            timeout=60,
            what="the calendar input batch and the reminder's send in the incoming trace",
            interval=0.5,
        )
        link = next(
            r
            for s in calendar
            if s["operationName"] == "calendar.reminder.send"
            for r in s["references"]
            if r["refType"] == "FOLLOWS_FROM"
        )
        linked = await eventually(
            lambda: asyncio.to_thread(jaeger.spans, link["traceID"]),
            until=lambda spans: (
                any(s["spanID"] == link["spanID"] for s in spans)
                and any(s["operationName"] == "timer.run calendar-dispatch" for s in spans)
            ),
            timeout=60,
            what="the dispatch batch the send links to",
            interval=0.5,
        )
    finally:
        worker.stop()
    # What Jaeger gave back, for the record (shown with -s).
    for s in sorted(expiry + calendar + linked, key=lambda s: s["startTime"]):
        print(
            f"trace {s['traceID']} span {s['spanID']} parent {parent_of(s)} "
            f"{s['operationName']} {tags(s)}"
        )
    # The run (timer process) → the owner-work batch (worker, across Kafka) → the owner.
    run = one(expiry, "timer.run document-expiry")
    batch = one(expiry, "input.batch")
    owner = one(expiry, "document_expiry.owner")
    assert parent_of(run) is None
    assert parent_of(batch) == run["spanID"]
    assert parent_of(owner) == batch["spanID"]
    assert owner["spanID"] == out_span  # the output record carries the owner span's context
    run_tags, owner_tags = tags(run), tags(owner)
    assert run_tags["schedule"] == "document-expiry" and run_tags["slot"]
    assert run_tags["run_id"] == run_tags["correlationId"] == owner_tags["correlationId"]
    assert headers["correlation-id"].decode() == run_tags["run_id"]
    assert owner_tags["ownerUserId"] == owner_doc["OwnerUserId"]
    assert tags(batch)["messaging.batch.message_count"] >= 1
    processes = {
        p["serviceName"]
        for p in jaeger.get(f"/api/traces/{out_trace}")["data"][0]["processes"].values()
    }
    assert processes == {"reminders-stream-e2e"}
    # The agent's batch continued the incoming trace: a child of the producer's span.
    calendar_batch = one(calendar, "input.batch")
    assert parent_of(calendar_batch) == PARENT
    assert tags(calendar_batch)["messaging.destination.name"].endswith(EVENTS)
    assert calendar_batch["operationName"] == f"input.batch {EVENTS}"
    # The dispatch run's send continues that trace: a child of the input batch, linked to the
    # run's batch span (another trace), and the output record carries its context.
    send = one(calendar, "calendar.reminder.send")
    assert parent_of(send) == calendar_batch["spanID"]
    follows = [r for r in send["references"] if r["refType"] == "FOLLOWS_FROM"]
    assert follows == [link] and link["traceID"] != TRACE, send["references"]
    [linked_batch] = [s for s in linked if s["spanID"] == link["spanID"]]
    assert linked_batch["operationName"] == "calendar.dispatch.batch"
    assert parent_of(linked_batch) == one(linked, "timer.run calendar-dispatch")["spanID"]
    send_tags = tags(send)
    assert send_tags["eventId"] == event["EventId"]
    assert send_tags["tenantId"] == event["TenantId"]
    assert send_tags["offsetMinutes"] == 15
    assert send_tags["reminderId"] == json.loads(due_record.value)["ReminderId"]
    due_headers = dict(due_record.headers)
    assert due_headers["traceparent"].decode() == f"00-{TRACE}-{send['spanID']}-01"
    # No PII in anything Jaeger holds for either trace.
    text = json.dumps([jaeger.get(f"/api/traces/{out_trace}"), jaeger.get(f"/api/traces/{TRACE}")])
    assert MASK not in text and CIPHER not in text
