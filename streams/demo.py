"""Demo workload: send calendar events to the real topic, then show what the worker made of them."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streams.contracts import CALENDAR_EVENTS, DLQ_SUFFIX, REMINDER_DUE
from streams.settings import Settings

EVENTS = 20
CANCELLED = 3
RESCHEDULED = 2
DUE_IN_SECONDS = 15


def _event(now: datetime, **fields: Any) -> dict[str, Any]:
    start = now + timedelta(seconds=60 + DUE_IN_SECONDS)
    msg: dict[str, Any] = {
        "ContractVersion": 1,
        "EventId": str(uuid.uuid4()),
        "TenantId": str(uuid.uuid4()),
        "OwnerUserId": str(uuid.uuid4()),
        "ClientUserId": None,
        "Kind": "Meeting",
        "StartAt": start.isoformat(),
        "TimeZone": "Europe/Moscow",
        "Status": "Planned",
        # 1 min before → due in ~15 s; 30 min before → already past, not materialized.
        "ReminderOffsetsMinutes": [1, 30],
        "AppointmentId": None,
        "Version": 1,
        "OccurredAt": now.isoformat(),
    }
    msg.update(fields)
    return msg


async def run_demo(settings: Settings, argv: list[str]) -> int:
    wait_seconds = 90.0
    now = datetime.now(UTC)
    events = [_event(now) for _ in range(EVENTS)]
    changes: list[dict[str, Any]] = []
    for e in events[:CANCELLED]:
        changes.append({**e, "Version": 2, "Status": "Cancelled"})
    for e in events[CANCELLED : CANCELLED + RESCHEDULED]:
        later = datetime.fromisoformat(e["StartAt"]) + timedelta(hours=1)
        changes.append({**e, "Version": 2, "StartAt": later.isoformat()})
    replay = dict(events[-1])
    stale = {**events[-2], "Version": 0, "Status": "Cancelled"}
    bad = [b"{oops", json.dumps({**events[-3], "Status": "Exploded", "Version": 9}).encode()]

    topic = settings.topic(CALENDAR_EVENTS.name)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for msg in [*events, *changes, replay, stale]:
            await producer.send(topic, json.dumps(msg).encode(), key=msg["EventId"].encode())
        for raw in bad:
            await producer.send(topic, raw, key=events[-3]["EventId"].encode())
        await producer.flush()
    finally:
        await producer.stop()
    sent = len(events) + len(changes) + 2 + len(bad)
    print(
        f"demo: sent {sent} messages to {topic} ({EVENTS} events, {CANCELLED} cancellations, "
        f"{RESCHEDULED} reschedules, 1 replay, 1 stale version, {len(bad)} malformed)"
    )

    ids = [uuid.UUID(e["EventId"]) for e in events]
    expected_due = EVENTS - CANCELLED - RESCHEDULED
    print(
        f"demo: waiting up to {wait_seconds:.0f}s for {expected_due} reminder-due messages "
        f"(reminders come due {DUE_IN_SECONDS}s after sending) ..."
    )
    due_topic = settings.topic(REMINDER_DUE.name)
    got = await _collect_due(settings, due_topic, {str(i) for i in ids}, expected_due, wait_seconds)
    dlq = await _count(settings, topic + DLQ_SUFFIX, {events[-3]["EventId"]}, 5.0)
    rows = await _rows(settings.database_url, ids)
    print()
    print("demo results")
    print(f"  events in calendar.events                {rows['events']:>5}   (expected {EVENTS})")
    for status in ("Pending", "Sent", "Skipped"):
        print(f"  reminder rows {status:<26} {rows.get(status, 0):>5}")
    print(f"  reminder-due messages on {due_topic}: {len(got)} (expected {expected_due})")
    print(f"  dead-lettered on {topic + DLQ_SUFFIX}: {dlq} (expected {len(bad)})")
    print(f"  web: http://{settings.web_host}:{settings.web_port}/health  /metrics  /status")
    ok = rows["events"] == EVENTS and len(got) == expected_due and dlq == len(bad)
    print("demo: OK" if ok else "demo: NOT as expected (see the worker log)")
    return 0 if ok else 1


async def _collect_due(
    settings: Settings, topic: str, event_ids: set[str], count: int, timeout: float
) -> dict[str, Any]:
    """ReminderIds seen on the reminder-due topic for our events (duplicates collapse)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=settings.kafka_bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    seen: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + timeout
        while len(seen) < count and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for r in records:
                    body = json.loads(r.value)
                    if body.get("EventId") in event_ids:
                        seen[body["ReminderId"]] = body
    finally:
        await consumer.stop()
    return seen


async def _count(settings: Settings, topic: str, keys: set[str], timeout: float) -> int:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=settings.kafka_bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    n = 0
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                n += sum(1 for r in records if r.key and r.key.decode() in keys)
    finally:
        await consumer.stop()
    return n


async def _rows(dsn: str, ids: list[uuid.UUID]) -> dict[str, int]:
    conn = await asyncpg.connect(dsn)
    try:
        out = {
            "events": await conn.fetchval(
                "SELECT count(*) FROM calendar.events WHERE event_id = ANY($1::uuid[])", ids
            )
        }
        for r in await conn.fetch(
            "SELECT status, count(*) AS n FROM calendar.event_reminders "
            "WHERE event_id = ANY($1::uuid[]) GROUP BY status",
            ids,
        ):
            out[r["status"]] = r["n"]
        return out
    finally:
        await conn.close()


def main() -> None:  # pragma: no cover - convenience
    from streams.settings import load_settings

    raise SystemExit(asyncio.run(run_demo(load_settings(), [])))
