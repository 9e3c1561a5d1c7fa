"""The calendar part of ``make demo``: events, cancellations, reschedules, a replay, a stale
Version and two malformed messages on the real topic; then what came out of them."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from db import event_reminders as reminders_repo
from db import events as events_repo
from db.connector import connect
from streams.contracts import CALENDAR_EVENTS, DLQ_SUFFIX, REMINDER_DUE
from streams.contracts.calendar import CalendarEventChanged, EventStatus
from streams.demo_kit import DemoKafka
from streams.settings import Settings

EVENTS = 20
CANCELLED = 3
RESCHEDULED = 2
DUE_IN_SECONDS = 15


@dataclass
class CalendarDemo:
    events: list[CalendarEventChanged] = field(default_factory=list)
    malformed: int = 0

    @property
    def expected_due(self) -> int:
        return EVENTS - CANCELLED - RESCHEDULED


def _event(now: datetime) -> CalendarEventChanged:
    return CalendarEventChanged(
        event_id=uuid.uuid4(),
        tenant_id=uuid.uuid4(),
        owner_user_id=uuid.uuid4(),
        kind="Meeting",
        start_at=now + timedelta(seconds=60 + DUE_IN_SECONDS),
        time_zone="Europe/Moscow",
        status=EventStatus.PLANNED,
        # 1 min before → due in ~15 s; 30 min before → already past, not materialized.
        reminder_offsets_minutes=[1, 30],
        version=1,
        occurred_at=now,
    )


async def send(settings: Settings, kafka: DemoKafka) -> CalendarDemo:
    now = datetime.now(UTC)
    demo = CalendarDemo(events=[_event(now) for _ in range(EVENTS)])
    events = demo.events
    changes = [
        e.model_copy(update={"version": 2, "status": EventStatus.CANCELLED})
        for e in events[:CANCELLED]
    ] + [
        e.model_copy(update={"version": 2, "start_at": e.start_at + timedelta(hours=1)})
        for e in events[CANCELLED : CANCELLED + RESCHEDULED]
    ]
    replay = events[-1]
    stale = events[-2].model_copy(update={"version": 0, "status": EventStatus.CANCELLED})
    # Malformed on purpose (the DLQ catches them): not JSON, and an unknown Status.
    bad_status = json.loads(events[-3].to_json()) | {"Status": "Exploded", "Version": 9}
    bad = [b"{oops", json.dumps(bad_status).encode()]
    demo.malformed = len(bad)
    topic = settings.topic(CALENDAR_EVENTS.name)
    records = [(str(m.event_id), m.to_json()) for m in [*events, *changes, replay, stale]]
    records += [(str(events[-3].event_id), raw) for raw in bad]
    await kafka.send(topic, records)
    print(
        f"demo: sent {len(records)} messages to {topic} ({EVENTS} events, {CANCELLED} "
        f"cancellations, {RESCHEDULED} reschedules, 1 replay, 1 stale version, {len(bad)} malformed)"
    )
    return demo


async def report(settings: Settings, kafka: DemoKafka, demo: CalendarDemo, wait: float) -> bool:
    ids = [e.event_id for e in demo.events]
    wanted = {str(i) for i in ids}
    due_topic = settings.topic(REMINDER_DUE.name)
    print(
        f"demo: waiting up to {wait:.0f}s for {demo.expected_due} reminder-due messages "
        f"(reminders come due {DUE_IN_SECONDS}s after sending) ..."
    )
    due = await kafka.collect(
        due_topic,
        lambda body: body.get("EventId") in wanted,
        key=lambda body: body["ReminderId"],
        count=demo.expected_due,
        timeout=wait,
    )
    dlq_topic = settings.topic(CALENDAR_EVENTS.name) + DLQ_SUFFIX
    dead = await kafka.count_keys(dlq_topic, {str(demo.events[-3].event_id)}, timeout=5.0)
    conn = await connect(settings.database_url)
    try:
        stored = await events_repo.count(conn, ids)
        by_status = await reminders_repo.status_count(conn, ids)
    finally:
        await conn.close()
    print()
    print("demo results")
    print(f"  events in calendar.events                {stored:>5}   (expected {EVENTS})")
    for status in ("Pending", "Sent", "Skipped"):
        print(f"  reminder rows {status:<26} {by_status.get(status, 0):>5}")
    print(f"  reminder-due messages on {due_topic}: {len(due)} (expected {demo.expected_due})")
    print(f"  dead-lettered on {dlq_topic}: {dead} (expected {demo.malformed})")
    return stored == EVENTS and len(due) == demo.expected_due and dead == demo.malformed
