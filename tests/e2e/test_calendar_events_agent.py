"""A real worker process consumes pin.calendar.events.v1 from real Kafka into PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from devkit.kafka import produce, read_to_end
from devkit.messages.factories import calendar_event, encode
from devkit.observe.metrics import sample
from devkit.wait import eventually
from devkit.workers import WorkerProcess, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

EVENTS = "pin.calendar.events.v1"


@pytest.fixture(scope="module")
def stack(
    module_database_url: str, kafka_bootstrap: str, module_topic_prefix: str, module_tmp: Path
) -> Iterator[dict[str, Any]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=module_topic_prefix)
    asyncio.run(ensure_topics(settings, contract_topic_names(settings)))
    env = worker_env(module_database_url, kafka_bootstrap, module_topic_prefix)
    worker = WorkerProcess(env, module_tmp, "agent-worker").start()
    state: dict[str, Any] = {}
    try:
        asyncio.run(worker.wait_ready())
        state = {
            "db": module_database_url,
            "kafka": kafka_bootstrap,
            "topic": module_topic_prefix + EVENTS,
            "dlq": module_topic_prefix + EVENTS + ".dlq",
            "worker": worker,
            "env": env,
            "tmp": module_tmp,
        }
        yield state
    finally:
        worker.stop()
        if state.get("worker") not in (None, worker):
            state["worker"].stop()


async def wait_for(db: str, query: str, *args: Any, expect: Any, timeout: float = 60.0) -> Any:
    """Poll PostgreSQL until ``query`` returns ``expect`` (a signal, with a deadline)."""
    conn = await asyncpg.connect(db)
    try:
        return await eventually(
            lambda: conn.fetchval(query, *args),
            until=lambda value: value == expect,
            timeout=timeout,
            what=f"{query} = {expect!r}",
            interval=0.1,
        )
    finally:
        await conn.close()


@pytest.mark.timeout(300)  # module worker start 90 + three waits of 60 s
async def test_event_becomes_projection_row_and_older_versions_change_nothing(
    stack: dict[str, Any],
) -> None:
    # Tomorrow: the running worker dispatches on the real clock, and these rows must not
    # come due during the test (a fixed date here started failing on that date).
    base = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    starts = {v: base + timedelta(hours=2 + v) for v in range(5)}
    v1 = calendar_event(Version=1, StartAt=starts[1], ReminderOffsetsMinutes=[60])
    key = v1["EventId"]

    def state(version: int, start_version: int, kind: str = "Meeting") -> bytes:
        return encode(
            {**v1, "Version": version, "StartAt": starts[start_version].isoformat(), "Kind": kind}
        )

    await produce(stack["kafka"], stack["topic"], [(key, state(1, 1))])
    await wait_version(stack["db"], key, 1)
    await produce(stack["kafka"], stack["topic"], [(key, state(3, 3, "Call"))])
    await wait_version(stack["db"], key, 3)
    # Older states and a replay, then v4 on the same key (same partition, so it is
    # consumed after them). Had v2 or v0 been applied, their StartAt would have left
    # reminder rows behind with their due times.
    await produce(
        stack["kafka"],
        stack["topic"],
        [
            (key, state(2, 2)),
            (key, state(3, 3, "Call")),
            (key, state(0, 0)),
            (key, state(4, 3, "Final")),
        ],
    )
    await wait_version(stack["db"], key, 4)
    conn = await asyncpg.connect(stack["db"])
    try:
        row = await conn.fetchrow(
            "SELECT kind, start_at FROM calendar.events WHERE event_id = $1", uuid.UUID(key)
        )
        dues = await conn.fetch(
            "SELECT due_at, status FROM calendar.event_reminders WHERE event_id = $1 ORDER BY due_at",
            uuid.UUID(key),
        )
    finally:
        await conn.close()
    assert row is not None and row["kind"] == "Final" and row["start_at"] == starts[3]
    assert [(r["due_at"], r["status"]) for r in dues] == [
        (starts[1] - timedelta(minutes=60), "Skipped"),
        (starts[3] - timedelta(minutes=60), "Pending"),
    ]


async def wait_version(db: str, key: str, version: int) -> None:
    await wait_for(
        db,
        "SELECT version FROM calendar.events WHERE event_id = $1",
        uuid.UUID(key),
        expect=version,
    )


async def test_replay_changes_nothing(stack: dict[str, Any]) -> None:
    msg = calendar_event(Version=5)
    key = msg["EventId"]
    await produce(stack["kafka"], stack["topic"], [(key, encode(msg))])
    await wait_version(stack["db"], key, 5)
    # Replay the same state three times, then a newer state as the "passed" signal.
    await produce(stack["kafka"], stack["topic"], [(key, encode(msg))] * 3)
    # A newer state that changes the projection (Kind) is the "consumed past" signal; a newer
    # Version with an identical state would be answered by the cache without PostgreSQL.
    newer = {**msg, "Version": 6, "Kind": "Call"}
    await produce(stack["kafka"], stack["topic"], [(key, encode(newer))])
    await wait_for(
        stack["db"],
        "SELECT version FROM calendar.events WHERE event_id = $1",
        uuid.UUID(key),
        expect=6,
    )
    conn = await asyncpg.connect(stack["db"])
    try:
        reminders = await conn.fetchval(
            "SELECT count(*) FROM calendar.event_reminders WHERE event_id = $1", uuid.UUID(key)
        )
    finally:
        await conn.close()
    # Two offsets → two reminder rows, however many times the state was replayed.
    assert reminders == 2


async def test_malformed_messages_go_to_dlq_with_reason_and_partition_keeps_flowing(
    stack: dict[str, Any],
) -> None:
    good = calendar_event(Version=1)
    key = good["EventId"]
    bad_schema = calendar_event(EventId=key, Version=1)
    del bad_schema["StartAt"]
    bad_version = calendar_event(EventId=key, Version=1, ContractVersion=2)
    bad_enum = calendar_event(EventId=key, Version=1, Status="Exploded")
    records: list[tuple[str | None, bytes | None]] = [
        (key, b"{not json"),
        (key, encode(bad_schema)),
        (key, encode(bad_version)),
        (key, encode(bad_enum)),
        (key, None),
        (key, encode(good)),  # same key = same partition, after the bad ones
    ]
    await produce(stack["kafka"], stack["topic"], records)
    await wait_for(
        stack["db"],
        "SELECT version FROM calendar.events WHERE event_id = $1",
        uuid.UUID(key),
        expect=1,
    )

    # The good state came after the bad ones on their partition, and the agent dead-letters
    # (acknowledged by Kafka) before it applies what follows: the DLQ is complete now.
    dead = await read_to_end(stack["kafka"], stack["dlq"])
    ours = [r for r in dead if r.key == key.encode()]
    assert len(ours) == 5
    headers = [dict(r.headers) for r in ours]
    kinds = sorted(h["dlq-error-kind"].decode() for h in headers)
    assert kinds == ["contract-version", "json", "json", "schema", "schema"]
    reasons = {h["dlq-error-kind"].decode(): h["dlq-reason"].decode() for h in headers}
    assert "ContractVersion" in reasons["contract-version"]
    assert any("StartAt" in h["dlq-reason"].decode() for h in headers)
    assert all(h["dlq-source-topic"].decode() == stack["topic"] for h in headers)
    # The original bytes are kept, so nothing is lost.
    assert {r.value for r in ours} >= {b"{not json", encode(bad_schema)}

    status, body = stack["worker"].get("/metrics")
    assert status == 200
    assert 'reminders_stream_dlq_messages_total{kind="json"' in body


@pytest.mark.timeout(420)  # applying 60 + sessions 30 + restart 90 + rest 90 + metric 30
async def test_worker_killed_mid_stream_loses_no_message(stack: dict[str, Any]) -> None:
    # A second worker (same group) takes over after the first is SIGKILLed mid-flow.
    n = 3000
    msgs = [calendar_event(Version=1, ReminderOffsetsMinutes=[]) for _ in range(n)]
    marker_kind = f"crash-{uuid.uuid4().hex[:6]}"
    msgs = [{**m, "Kind": marker_kind} for m in msgs]
    victim: WorkerProcess = stack["worker"]
    await produce(stack["kafka"], stack["topic"], [(m["EventId"], encode(m)) for m in msgs])
    conn = await asyncpg.connect(stack["db"])

    async def applied() -> int:
        return int(
            await conn.fetchval("SELECT count(*) FROM calendar.events WHERE kind = $1", marker_kind)
        )

    async def other_sessions() -> int:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            )
        )

    try:
        # Kill it as soon as it has committed some of the stream.
        seen = await eventually(
            applied, timeout=60, what="the first worker applying the stream", interval=0.02
        )
        victim.kill()
        # Its sessions end with it (a commit already sent may still land); after that the
        # count is exactly what the killed worker applied.
        await eventually(
            other_sessions,
            until=lambda k: k == 0,
            timeout=30,
            what="the killed worker's database sessions gone",
        )
        at_kill = await applied()
        assert 0 < seen <= at_kill < n, (
            f"not killed mid-stream: {at_kill} of {n} applied when the worker died"
        )
        replacement = WorkerProcess(stack["env"], stack["tmp"], "agent-worker-2").start()
        stack["worker"] = replacement
        await replacement.wait_ready()
        await wait_for(
            stack["db"],
            "SELECT count(*) FROM calendar.events WHERE kind = $1",
            marker_kind,
            expect=n,
            timeout=90,
        )
    finally:
        await conn.close()

    # The replacement applied exactly the messages the killed worker had not: what it
    # re-read of the victim's work (offsets not yet committed) found PostgreSQL already
    # up to date and counts as noop. The counter moves after the commit, hence the wait.
    def applied_by_replacement() -> float | None:
        status, text = replacement.get("/metrics")
        assert status == 200
        return sample(text, "reminders_stream_messages_total", topic=EVENTS, result="applied")

    await eventually(
        applied_by_replacement,
        until=lambda v: v == n - at_kill,
        timeout=30,
        what=f"reminders_stream_messages_total{{result=applied}} of the replacement = {n - at_kill}",
    )


async def test_status_views_show_agents_tables_timers_and_outbox(stack: dict[str, Any]) -> None:
    worker: WorkerProcess = stack["worker"]
    status, body = worker.get("/status?format=json")
    assert status == 200
    agents = {a["agent"]: a for a in body["agents"]}
    assert set(agents) == {
        "calendar-events",
        "automation-source-events",
        "automation-reminder-settings",
        "automation-business-units",
        "automation-report-subscriptions",
        "profile-person-documents",
        "profile-expiry-owners",
    }
    assert agents["calendar-events"]["messages"][stack["topic"]]["applied"] > 0
    assert body["tables"][0]["table"] == "calendar-event-cache"
    assert {t["name"] for t in body["timers"]} == {
        "calendar-dispatch",
        "outbox-retention",
        "table-retention",
        "timer-slot-prune",
        "automation-scheduler",
        "automation-stale-cleanup",
        "automation-fanout",
        "worker-heartbeat",
        "automation-reconcile-reminders",
        "automation-reconcile-reports",
        "document-expiry",
    }
    assert "backlog" in body["outbox"]
    status, page = worker.get("/status")
    assert status == 200 and '<h2 id="schedules">Schedules</h2>' in page
    assert "calendar-dispatch" in page
    status, timers = worker.get("/timers")
    assert status == 200 and all("next_fire_at" in t for t in timers)
    status, live = worker.get("/health/live")
    assert (status, live) == (200, {"status": "alive"})
