"""The worker's timer process (streams/timer_process), driven as a user would: a real worker,
events from a plain Kafka producer, reminders read back from the output topic.

- the dispatcher and the relay run in the child; an event that makes a reminder due in a
  few seconds wakes the child's dispatcher through the worker (no 120 s cycle needed);
- the worker's /metrics, /timers and /health show the child's work as the worker's own;
- a child killed by itself is started again (new pid, restarts counted), and reminders
  keep going out; a worker killed by itself does not leave its child behind;
- a SIGSTOPped child makes /health not ready within the stall bound; resumed (SIGCONT) it is
  ready again, left stopped it is killed and started again after the kill bound; the
  reminders that came due meanwhile are published once each.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from devkit.database import scalar
from devkit.kafka import read_to_end
from devkit.loads.calendar_load import calendar_message
from devkit.observe.metrics import sample
from devkit.stacks.pause import process_state
from devkit.wait import eventually
from devkit.workers import WorkerProcess, process_tree, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

EVENTS = "pin.calendar.events.v1"
DUE = "pin.calendar.reminder-due.v1"
LEAD = timedelta(seconds=4)  # DueAt this far after the event is sent


def alive(pid: int) -> bool:
    return process_state(pid) not in {"", "Z"}


async def send_soon_due(producer: AIOKafkaProducer, topic: str) -> tuple[str, datetime]:
    """One calendar event whose only reminder is due LEAD from now; (EventId, DueAt)."""
    event_id = str(uuid.uuid4())
    due = datetime.now(UTC) + LEAD
    body = calendar_message(
        event_id=event_id,
        tenant_id=str(uuid.uuid4()),
        owner_user_id=str(uuid.uuid4()),
        start_at=due + timedelta(minutes=1),
        offsets=[1],
        version=1,
        occurred_at=datetime.now(UTC),
    )
    await producer.send_and_wait(topic, json.dumps(body).encode(), key=event_id.encode())
    return event_id, due


async def arrival(consumer: AIOKafkaConsumer, event_id: str, timeout: float) -> float:
    """Seconds after its DueAt the ReminderDueEvent of ``event_id`` was read off the topic."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = await consumer.getmany(timeout_ms=200)
        for records in batch.values():
            for r in records:
                body = json.loads(r.value or b"{}")
                if body.get("EventId") == event_id:
                    due = datetime.fromisoformat(body["StartAt"]) - timedelta(minutes=1)
                    return (datetime.now(UTC) - due).total_seconds()
    raise AssertionError(f"no ReminderDueEvent for {event_id} within {timeout}s")


@pytest.mark.timeout(300)
async def test_the_timer_process_dispatches_restarts_and_never_outlives_its_worker(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    worker = WorkerProcess(worker_env(database_url, kafka_bootstrap, topic_prefix), tmp_path)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    consumer = AIOKafkaConsumer(
        settings.topic(DUE), bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest"
    )
    await producer.start()
    await consumer.start()
    try:
        worker.start()
        health = await worker.wait_ready()
        assert health["timer_process"] == "ok", health
        pids = worker.pids
        assert len(pids) == 2, f"worker and timer process expected, got {pids}"
        child = pids[1]

        # The events agent (in the worker) wakes the child's dispatcher for the new DueAt.
        event_id, _ = await send_soon_due(producer, settings.topic(EVENTS))
        late = await arrival(consumer, event_id, timeout=60)
        assert 0 <= late < 2.0, f"reminder {late:.3f}s after DueAt (the wake-up was lost?)"

        _, timers = worker.get("/timers")
        where = {t["name"]: t["process"] for t in timers}
        assert where["calendar-dispatch"] == "timer" and where["outbox-retention"] == "worker"
        dispatch = next(t for t in timers if t["name"] == "calendar-dispatch")
        assert dispatch["counts"]["wakes"] >= 1, dispatch  # the child's runs, not the parent's
        _, text = worker.get("/metrics")
        assert (
            sample(str(text), "calendar_reminder_dispatch_items_total", result="sent") or 0
        ) >= 1
        # The relay counts a row once its mark commits, a moment after Kafka has it.
        await eventually(
            lambda: sample(
                str(worker.get("/metrics")[1]),
                "reminders_outbox_published_total",
                topic=settings.topic(DUE),
            ),
            until=lambda n: (n or 0) >= 1,
            timeout=10,
            what="the child's reminders_outbox_published_total in the worker's /metrics",
        )
        assert sample(str(text), "reminders_worker_timer_process_up") == 1

        # The child dies by itself: the worker starts another and counts it.
        os.kill(child, signal.SIGKILL)
        restarted = await eventually(
            lambda: _second(worker.pids),
            until=lambda pid: pid is not None and pid != child,
            timeout=30,
            what="a new timer process",
        )
        await eventually(
            lambda: worker.get("/health")[1].get("timer_process"),
            until=lambda v: v == "ok",
            timeout=60,
            what="the new timer process ready",
        )
        _, text = worker.get("/metrics")
        assert sample(str(text), "reminders_worker_timer_process_restarts_total") == 1
        event_id, _ = await send_soon_due(producer, settings.topic(EVENTS))
        late = await arrival(consumer, event_id, timeout=60)
        assert 0 <= late < 2.0, f"after the restart: {late:.3f}s after DueAt"

        # The worker dies by itself (SIGKILL, not its group): its child goes too.
        assert worker.proc is not None
        os.kill(worker.proc.pid, signal.SIGKILL)
        worker.proc.wait(timeout=10)
        assert restarted is not None
        await eventually(
            lambda: alive(restarted),
            until=lambda up: not up,
            timeout=40,
            what="the orphaned timer process to exit",
        )
        assert "action=timer_process_parent_gone" in worker.tail(200)
    finally:
        worker.kill()
        await consumer.stop()
        await producer.stop()


STALL = 2.0
KILL = 12.0


async def _stalled_within(worker: WorkerProcess, child: int) -> float:
    """Seconds from now until /health is not ready with the timer process stalled."""
    stopped = time.monotonic()
    await eventually(
        lambda: worker.get("/health"),
        # A loop already late in the child's last line may name the stall first; once the
        # child is silent past the limit, silence does.
        until=lambda h: (
            h[0] != 200 and str(h[1].get("timer_process")).startswith("stalled: silent for")
        ),
        timeout=30,
        interval=0.1,
        what="/health not ready: timer process stalled, silent",
    )
    assert _second(worker.pids) == child, "stalled, not restarted yet"
    return time.monotonic() - stopped


@pytest.mark.timeout(300)
async def test_a_stopped_timer_process_is_not_ready_then_killed_and_reminders_go_out_once(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix)
    await ensure_topics(settings, contract_topic_names(settings))
    env = worker_env(
        database_url,
        kafka_bootstrap,
        topic_prefix,
        WORKER_TIMER_PROCESS_STALL_SECONDS=str(STALL),
        WORKER_TIMER_PROCESS_KILL_SECONDS=str(KILL),
    )
    worker = WorkerProcess(env, tmp_path)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    child: int | None = None
    try:
        worker.start()
        health = await worker.wait_ready()
        assert health["timer_process"] == "ok", health
        child = _second(worker.pids)
        assert child is not None

        # Stopped, then resumed before the kill bound: the same process goes on.
        os.kill(child, signal.SIGSTOP)
        sent = [await send_soon_due(producer, settings.topic(EVENTS)) for _ in range(3)]
        noticed = await _stalled_within(worker, child)
        # The bound, plus a watchdog tick, a beat interval and a /health round trip.
        assert noticed < STALL + 2.5, f"/health not ready {noticed:.1f}s after SIGSTOP"
        print(f"\n/health not ready {noticed:.2f}s after SIGSTOP (stall bound {STALL:g}s)")
        due = max(at for _, at in sent)
        await eventually(
            lambda: datetime.now(UTC) > due, until=bool, timeout=30, what="all due meanwhile"
        )
        os.kill(child, signal.SIGCONT)
        await eventually(
            lambda: worker.get("/health")[1].get("timer_process"),
            until=lambda v: v == "ok",
            timeout=30,
            what="ready again after SIGCONT",
        )
        assert _second(worker.pids) == child
        # Resumed, it sends them; their marks commit before it is stopped again (a pass cut
        # off before its commit would send them once more, which at-least-once allows).
        await eventually(
            lambda: _published(database_url, settings.topic(DUE)),
            until=lambda n: n == len(sent),
            timeout=60,
            what=f"{len(sent)} reminders published after SIGCONT",
        )

        # Stopped for good: killed after the kill bound and started again.
        os.kill(child, signal.SIGSTOP)
        stopped = time.monotonic()
        sent += [await send_soon_due(producer, settings.topic(EVENTS)) for _ in range(3)]
        await _stalled_within(worker, child)
        restarted = await eventually(
            lambda: _second(worker.pids),
            until=lambda pid: pid is not None and pid != child,
            timeout=KILL + 30,
            what="the stopped timer process killed and started again",
        )
        print(f"restarted {time.monotonic() - stopped:.2f}s after SIGSTOP (kill bound {KILL:g}s)")
        assert not alive(child)
        await eventually(
            lambda: worker.get("/health")[1].get("timer_process"),
            until=lambda v: v == "ok",
            timeout=60,
            what="the new timer process ready",
        )
        text = str(worker.get("/metrics")[1])
        assert sample(text, "reminders_worker_timer_process_stall_kills_total") == 1
        assert (sample(text, "reminders_worker_timer_process_stalls_total") or 0) >= 2
        assert restarted is not None

        # Every reminder published (its outbox row marked), then the topic read to its end.
        ids = {event_id for event_id, _ in sent}
        await eventually(
            lambda: _published(database_url, settings.topic(DUE)),
            until=lambda n: n == len(ids),
            timeout=60,
            what=f"{len(ids)} reminders published",
        )
        records = await read_to_end(kafka_bootstrap, settings.topic(DUE))
        seen = [json.loads(r.value or b"{}").get("EventId") for r in records]
        assert sorted(seen) == sorted(ids), f"published {seen}, expected each of {ids} once"
    finally:
        if child is not None and alive(child):
            os.kill(child, signal.SIGCONT)
        worker.kill()
        await producer.stop()


async def _published(database_url: str, topic: str) -> int:
    return int(
        await scalar(
            database_url,
            "SELECT count(*) FROM ops.outbox WHERE published_at IS NOT NULL AND topic = $1",
            topic,
        )
    )


def _second(pids: list[int]) -> int | None:
    return pids[1] if len(pids) > 1 else None


def test_process_tree_lists_children_after_their_parent() -> None:
    tree = process_tree(os.getpid())
    assert tree[0] == os.getpid()
