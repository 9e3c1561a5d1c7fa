"""The document expiry part of ``make demo``: a few owners' documents on the real topic, the
daily run triggered by hand (the manual trigger's code path, in this process), then a re-run
that sends nothing; and what came out on the reminders topic."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from db import person_documents as repo
from db.connector import connect
from streams.contracts import DOCUMENT_EXPIRY_REMINDERS, PERSON_DOCUMENTS
from streams.contracts.profile import DocumentStatus, PersonDocumentChanged
from streams.demo_kit import DemoKafka
from streams.settings import Settings
from streams.timers.runs import RunRecord

NAME = "document-expiry"
POLL_SECONDS = 0.5


@dataclass
class ProfileDemo:
    documents: list[PersonDocumentChanged] = field(default_factory=list)
    expected_events: int = 0
    expected_reminders: int = 0

    @property
    def owners(self) -> set[str]:
        return {str(d.owner_user_id) for d in self.documents}


# Per owner: (type, DaysLeft or None for no expiry date, status). Owner 0 gets one event with
# two documents (30 crossed; 6 days left marks 30 and 7, sends only 7), owner 1 an expiry
# reminder (0) while its open-ended INN is out of scope, owner 2 a 1-day reminder (its
# archived document is not), owner 3 nothing (45 days is outside the 30-day window).
PLAN: list[list[tuple[str, int | None, DocumentStatus]]] = [
    [
        ("InternationalPassport", 30, DocumentStatus.ACTIVE),
        ("DriverLicense", 6, DocumentStatus.ACTIVE),
    ],
    [("ResidencePermit", -2, DocumentStatus.ACTIVE), ("Inn", None, DocumentStatus.ACTIVE)],
    [("Visa", 1, DocumentStatus.ACTIVE), ("OldVisa", 1, DocumentStatus.ARCHIVED)],
    [("InternationalPassport", 45, DocumentStatus.ACTIVE)],
]


async def send(settings: Settings, kafka: DemoKafka) -> ProfileDemo:
    now = datetime.now(UTC)
    today = now.date()
    demo = ProfileDemo()
    for documents in PLAN:
        owner = uuid.uuid4()
        for kind, left, status in documents:
            demo.documents.append(
                PersonDocumentChanged(
                    document_id=uuid.uuid4(),
                    owner_user_id=owner,
                    person_id=uuid.uuid4(),
                    type=kind,
                    number_mask="45** ****12",
                    expires_at=today + timedelta(days=left) if left is not None else None,
                    status=status,
                    version=1,
                    occurred_at=now,
                )
            )
    demo.expected_events, demo.expected_reminders = 3, 4
    topic = settings.topic(PERSON_DOCUMENTS.name)
    await kafka.send(topic, [(str(d.owner_user_id), d.to_json()) for d in demo.documents])
    print(
        f"demo: sent {len(demo.documents)} person documents of {len(PLAN)} owners to {topic} "
        "(expiring in 30, 6, 1 days, expired 2 days ago, in 45 days, no expiry date, archived)"
    )
    return demo


async def _run(settings: Settings, rerun: bool) -> RunRecord:
    """One run of the daily job through ``python -m streams timers run``'s code path."""
    from streams.timer_app import create_timers
    from streams.timers.manual import run_manual

    ctx = create_timers(settings)
    try:
        record = await run_manual(ctx, NAME, rerun=rerun)
        if record.result == "deduped":  # today's slot ran already (an earlier demo)
            record = await run_manual(ctx, NAME, rerun=True)
        return record
    finally:
        await ctx.runtime.close()


def _count(record: RunRecord, key: str) -> int:
    summary = record.summary if isinstance(record.summary, dict) else {}
    value: Any = summary.get(key, -1)
    return int(value) if isinstance(value, int) else -1


async def report(settings: Settings, kafka: DemoKafka, demo: ProfileDemo, wait: float) -> bool:
    owners = [uuid.UUID(o) for o in demo.owners]
    conn = await connect(settings.database_url)
    try:
        deadline = time.monotonic() + wait
        stored = 0
        while time.monotonic() < deadline:
            stored = await repo.owners_count(conn, owners)
            if stored == len(demo.documents):
                break
            await asyncio.sleep(POLL_SECONDS)
    finally:
        await conn.close()
    print(f"demo: running {NAME} by hand (as `python -m streams timers run {NAME}` does) ...")
    first = await _run(settings, rerun=False)
    topic = settings.topic(DOCUMENT_EXPIRY_REMINDERS.name)
    wanted = demo.owners
    events = await kafka.collect(
        topic,
        lambda body: body.get("OwnerUserId") in wanted,
        key=lambda body: body["OwnerUserId"],
        count=demo.expected_events,
        timeout=wait,
    )
    reminders = sum(len(e.get("Documents", [])) for e in events.values())
    again = await _run(settings, rerun=True)
    on_topic = await kafka.count_keys(topic, wanted, timeout=5.0)
    print()
    print("document expiry results")
    print(
        f"  documents in profile.person_documents    {stored:>5}   (expected {len(demo.documents)})"
    )
    print(
        f"  run ({first.kind}): {first.result}, reminders_sent {_count(first, 'reminders_sent')}, "
        f"owners_notified {_count(first, 'owners_notified')}"
    )
    print(
        f"  expiry reminders on {topic}: {len(events)} events, {reminders} documents "
        f"(expected {demo.expected_events} / {demo.expected_reminders})"
    )
    print(
        f"  re-run ({again.kind}): {again.result}, reminders_sent "
        f"{_count(again, 'reminders_sent')} (expected 0); events for these owners now "
        f"{on_topic} (expected {demo.expected_events})"
    )
    return (
        stored == len(demo.documents)
        and first.result == "ok"
        and len(events) == demo.expected_events
        and reminders == demo.expected_reminders
        and again.result == "ok"
        and _count(again, "reminders_sent") == 0
        and on_topic == demo.expected_events
    )
