"""The automation part of ``make demo``: a BU, two reminder settings and source changes on the
real topics (out of order: sources first), one source deactivated, one replay; then the
scheduler rows they became and the dispatch-requested messages once the rows came due."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from db import scheduler as repo
from db.connector import connect
from streams.contracts import (
    BUSINESS_UNITS,
    DISPATCH_REQUESTED,
    REMINDER_SETTINGS,
    SOURCE_EVENTS,
)
from streams.contracts.automation import (
    BusinessUnitChanged,
    Comparator,
    FiringPolicy,
    ReminderSettingChanged,
    SourceEntityChanged,
    Threshold,
    TriggerType,
)
from streams.demo_kit import DemoKafka
from streams.settings import Settings

SOURCES = 10
DUE_IN_SECONDS = 15


@dataclass
class AutomationDemo:
    sources: list[SourceEntityChanged] = field(default_factory=list)

    @property
    def expected_dispatches(self) -> int:
        # Each active source: one DateBased row (offset 0) and one ThresholdCondition row.
        return 2 * (SOURCES - 1)


async def send(settings: Settings, kafka: DemoKafka) -> AutomationDemo:
    now = datetime.now(UTC)
    bu = uuid.uuid4()
    demo = AutomationDemo(
        sources=[
            SourceEntityChanged(
                source_type="Booking",
                source_guid=uuid.uuid4(),
                business_unit_id=bu,
                version=1,
                occurred_at=now,
                is_active=True,
                attributes={"ExpiresOn": now.date().isoformat(), "BookedPercent": 95},
            )
            for _ in range(SOURCES)
        ]
    )
    send_at = (now + timedelta(seconds=DUE_IN_SECONDS)).time().replace(microsecond=0)
    date_setting = ReminderSettingChanged(
        setting_guid=uuid.uuid4(),
        business_unit_id=bu,
        source_type="Booking",
        trigger_type=TriggerType.DATE_BASED,
        trigger_key="ExpiresOn",
        offsets_days=[0],
        send_time_local=send_at,
        active=True,
        version=1,
    )
    threshold_setting = date_setting.model_copy(
        update={
            "setting_guid": uuid.uuid4(),
            "trigger_type": TriggerType.THRESHOLD_CONDITION,
            "trigger_key": "Capacity",
            "offsets_days": [],
            "threshold": Threshold(
                metric_key="BookedPercent",
                value=90,
                comparator=Comparator.GTE,
                firing_policy=FiringPolicy.FALSE_TO_TRUE,
            ),
        }
    )
    gone = demo.sources[-1].model_copy(update={"version": 2, "is_active": False})
    replay = demo.sources[0]
    source_topic = settings.topic(SOURCE_EVENTS.name)
    await kafka.send(
        source_topic,
        [(SOURCE_EVENTS.key(m), m.to_json()) for m in [*demo.sources, gone, replay]],
    )
    await kafka.send(
        settings.topic(REMINDER_SETTINGS.name),
        [(str(s.setting_guid), s.to_json()) for s in (date_setting, threshold_setting)],
    )
    unit = BusinessUnitChanged(business_unit_id=bu, time_zone_id="Europe/Berlin", version=1)
    await kafka.send(settings.topic(BUSINESS_UNITS.name), [(str(bu), unit.to_json())])
    print(
        f"demo: sent {SOURCES + 2} source changes ({SOURCES} sources, 1 deactivated, 1 replay), "
        "2 reminder settings (DateBased, ThresholdCondition) and 1 business unit, sources first"
    )
    return demo


async def report(settings: Settings, kafka: DemoKafka, demo: AutomationDemo, wait: float) -> bool:
    guids = {str(s.source_guid) for s in demo.sources}
    topic = settings.topic(DISPATCH_REQUESTED.name)
    print(
        f"demo: waiting up to {wait:.0f}s for {demo.expected_dispatches} dispatch-requested "
        f"messages (DateBased rows come due {DUE_IN_SECONDS}s after sending) ..."
    )
    dispatched = await kafka.collect(
        topic,
        lambda body: body.get("SourceGuid") in guids,
        key=lambda body: body["SchedulerKey"],
        count=demo.expected_dispatches,
        timeout=wait,
    )
    conn = await connect(settings.database_url)
    try:
        by_status = await repo.status_count(conn, [s.source_guid for s in demo.sources])
    finally:
        await conn.close()
    print()
    print("automation demo results")
    for status in ("Pending", "Processing", "Completed", "Deactivated"):
        print(f"  scheduler rows {status:<25} {by_status.get(status, 0):>5}")
    print(
        f"  scheduler rows in all                    {sum(by_status.values()):>5}   "
        f"(expected {demo.expected_dispatches}: none for the deactivated source)"
    )
    print(
        f"  dispatch-requested messages on {topic}: {len(dispatched)} "
        f"(expected {demo.expected_dispatches})"
    )
    return (
        len(dispatched) == demo.expected_dispatches
        and by_status.get("Completed", 0) == demo.expected_dispatches
        # The source deactivated before its setting and BU arrived never got a row.
        and sum(by_status.values()) == demo.expected_dispatches
    )
