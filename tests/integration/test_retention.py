"""Retention on real PostgreSQL: every table drains to its horizon in bounded batches, keeps
what is inside it, and a late input after a prune resurrects nothing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from devkit.harness.calendar import apply, make_runtime
from devkit.messages.factories import T0, calendar_event
from streams.clock import SystemClock
from streams.maintenance import (
    OutboxRetention,
    RetentionConfig,
    RetentionMetrics,
    TableRetention,
    TableRetentionConfig,
)
from streams.metrics import Metrics
from streams.slices.calendar.events import CalendarEventsApplier
from streams.timers.context import RunContext

pytestmark = pytest.mark.integration

LATER = T0 + timedelta(days=40)  # 40 days after the events start: past the 30-day horizon


def table_retention(pool: asyncpg.Pool, metrics: Metrics, **config: object) -> TableRetention:
    return TableRetention(
        pool,
        metrics=metrics.family(RetentionMetrics),
        config=TableRetentionConfig(**config),  # type: ignore[arg-type]
    )


async def count(pool: asyncpg.Pool, table: str) -> int:
    return int(await pool.fetchval(f"SELECT count(*) FROM {table}"))


# ------------------------------------------------------------------ outbox


async def test_outbox_retention_drains_past_the_old_per_run_cap_in_one_run(
    pool: asyncpg.Pool,
) -> None:
    """The old job stopped after 100 chunks (500,000 rows at its default size) and left the
    rest for an hour later although it said "more"; now one run drains to the horizon, every
    chunk its own bounded transaction."""
    published = T0 - timedelta(days=2)
    await pool.execute(
        "INSERT INTO ops.outbox (topic, key, payload, headers, published_at) "
        "SELECT 't', 'k' || g, '{}'::json, '{}'::jsonb, $1 FROM generate_series(1, 60500) g",
        published,
    )
    keep = await pool.fetchval(
        "INSERT INTO ops.outbox (topic, key, payload, headers, published_at) "
        "VALUES ('t', 'fresh', '{}', '{}', $1) RETURNING id",
        T0 - timedelta(hours=1),
    )
    unpublished = await pool.fetchval(
        "INSERT INTO ops.outbox (topic, key, payload, headers) VALUES ('t', 'u', '{}', '{}') "
        "RETURNING id"
    )
    metrics = Metrics()
    retention = OutboxRetention(
        pool,
        metrics=metrics.outbox,
        config=RetentionConfig(retention=timedelta(hours=24), chunk_size=500),
        retention_metrics=metrics.family(RetentionMetrics),
    )
    result = await retention.run_once(RunContext.at(T0, clock=SystemClock()))
    assert (result.deleted, result.chunks, result.more) == (60500, 122, False)
    left = sorted(r["id"] for r in await pool.fetch("SELECT id FROM ops.outbox"))
    assert left == sorted([keep, unpublished])
    registry = metrics.registry
    assert registry.get_sample_value("reminders_outbox_deleted_total") == 60500
    assert registry.get_sample_value(
        "reminders_retention_deleted_rows_total", {"table": "ops.outbox"}
    ) == (60500)


# ------------------------------------------------------------------ calendar


async def _event(applier: CalendarEventsApplier, pool: asyncpg.Pool, **fields: object) -> str:
    e = calendar_event(**fields)
    await apply(applier, e)
    return str(e["EventId"])


async def test_calendar_events_past_the_horizon_go_with_their_reminders_in_bounded_batches(
    database_url: str, pool: asyncpg.Pool
) -> None:
    applier = CalendarEventsApplier(make_runtime(database_url))
    old = [await _event(applier, pool) for _ in range(5)]
    live_poison = await _event(applier, pool)
    recent = [await _event(applier, pool, StartAt=LATER - timedelta(days=10)) for _ in range(2)]
    # The old events' reminders went out or were skipped; one event's row is still Pending
    # (a poison row backing off is live work).
    await pool.execute(
        "UPDATE calendar.event_reminders SET status = 'Sent', sent_at = due_at "
        "WHERE event_id = ANY($1::uuid[])",
        old,
    )
    assert await count(pool, "calendar.event_reminders") == 16
    metrics = Metrics()
    result = await table_retention(pool, metrics, batch_size=2).run_once(
        RunContext.at(LATER, clock=SystemClock())
    )
    assert result.deleted["calendar.events"] == 5
    assert result.deleted["calendar.event_reminders"] == 10
    assert not result.more["calendar.events"]
    left = {str(r["event_id"]) for r in await pool.fetch("SELECT event_id FROM calendar.events")}
    assert left == {live_poison, *recent}
    assert await count(pool, "calendar.event_reminders") == 6
    tombs = {
        str(r["event_id"]): r["version"]
        for r in await pool.fetch("SELECT event_id, version FROM calendar.event_tombstones")
    }
    assert tombs == dict.fromkeys(old, 1)
    last = metrics.family(RetentionMetrics).last("calendar.events")
    assert (last["last_deleted"], last["last_batches"]) == (5, 3)  # 2 + 2 + 1: bounded
    assert (
        metrics.registry.get_sample_value(
            "reminders_retention_deleted_rows_total", {"table": "calendar.event_reminders"}
        )
        == 10
    )


async def test_a_late_old_version_after_the_prune_resurrects_nothing(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """The message that comes back late: v1 (Planned, reminders due) replayed after v2
    (Cancelled) and the prune. Without the tombstone the event and its reminder come back."""
    applier = CalendarEventsApplier(make_runtime(database_url))
    v1 = calendar_event(ReminderOffsetsMinutes=[60])
    await apply(applier, v1)
    await apply(applier, {**v1, "Version": 2, "Status": "Cancelled", "OccurredAt": T0.isoformat()})
    metrics = Metrics()
    await table_retention(pool, metrics).run_once(RunContext.at(LATER, clock=SystemClock()))
    assert await count(pool, "calendar.events") == 0

    late = CalendarEventsApplier(make_runtime(database_url, now=T0 + timedelta(minutes=1)))
    replayed = await apply(late, v1)
    assert replayed.applied == 0
    assert await count(pool, "calendar.events") == 0
    assert await count(pool, "calendar.event_reminders") == 0

    # A Version newer than the tombstone is a real change and is stored.
    v3 = {**v1, "Version": 3, "StartAt": (LATER + timedelta(days=1)).isoformat()}
    newer = await apply(CalendarEventsApplier(make_runtime(database_url, now=LATER)), v3)
    assert newer.applied == 1
    assert await pool.fetchval("SELECT version FROM calendar.events") == 3


async def test_tombstones_past_their_horizon_raise_the_prune_horizon(
    database_url: str, pool: asyncpg.Pool
) -> None:
    applier = CalendarEventsApplier(make_runtime(database_url))
    v1 = calendar_event(ReminderOffsetsMinutes=[60], OccurredAt=T0 - timedelta(minutes=5))
    await apply(applier, v1)
    await apply(applier, {**v1, "Version": 2, "Status": "Cancelled", "OccurredAt": T0.isoformat()})
    metrics = Metrics()
    retention = table_retention(pool, metrics, tombstones=timedelta(days=100))
    await retention.run_once(RunContext.at(LATER, clock=SystemClock()))
    assert await count(pool, "calendar.event_tombstones") == 1
    inside = await retention.run_once(
        RunContext.at(LATER + timedelta(days=99), clock=SystemClock())
    )
    assert inside.deleted["calendar.event_tombstones"] == 0
    gone = await retention.run_once(RunContext.at(LATER + timedelta(days=101), clock=SystemClock()))
    assert gone.deleted["calendar.event_tombstones"] == 1
    assert await pool.fetchval("SELECT occurred_before FROM calendar.event_prune_horizon") == T0

    # Neither row nor tombstone now: the horizon decides. v1 happened before it: stale.
    replayed = await apply(CalendarEventsApplier(make_runtime(database_url)), v1)
    assert replayed.applied == 0
    assert await count(pool, "calendar.events") == 0
    # An event that happened after the horizon is new and stored.
    fresh = calendar_event(OccurredAt=T0 + timedelta(days=1), StartAt=LATER + timedelta(days=200))
    assert (await apply(CalendarEventsApplier(make_runtime(database_url)), fresh)).applied == 1


# ------------------------------------------------------------------ automation.scheduler


async def _row(pool: asyncpg.Pool, status: str, trigger: str, scheduled_on: datetime) -> int:
    automation = "ReportSubscription" if trigger in ("ScheduledRun", "ManualRun") else "Reminder"
    lease = scheduled_on + timedelta(minutes=2) if status == "Processing" else None
    return int(
        await pool.fetchval(
            "INSERT INTO automation.scheduler (automation_type_id, trigger_type_id, "
            "scheduler_key, scheduled_on, status_id, input_hash, processing_lease_expires_on, "
            "created_on, updated_on) VALUES ($1, $2, $3, $4, $5, repeat('a', 64), $6, $4, $4) "
            "RETURNING scheduler_id",
            automation,
            trigger,
            f"test:{uuid.uuid4()}",
            scheduled_on,
            status,
            lease,
        )
    )


async def test_finished_scheduler_rows_go_after_the_horizon_history_that_dedupes_stays(
    pool: asyncpg.Pool,
) -> None:
    old, recent = LATER - timedelta(days=31), LATER - timedelta(days=29)
    doomed = [
        await _row(pool, "Completed", "DateBased", old),
        await _row(pool, "Completed", "Recurring", old),
        await _row(pool, "Completed", "ScheduledRun", old),
        await _row(pool, "Deactivated", "DateBased", old),
        await _row(pool, "Deactivated", "ThresholdCondition", old),
        await _row(pool, "Cancelled", "ManualRun", old),
    ]
    kept = [
        # "fired once" dedupe: a threshold or manual-run key has no date and could come again
        await _row(pool, "Completed", "ThresholdCondition", old),
        await _row(pool, "Completed", "ManualRun", old),
        # live work
        await _row(pool, "Pending", "DateBased", old),
        await _row(pool, "Processing", "DateBased", old),
        await _row(pool, "Failed", "DateBased", old),
        # inside the horizon
        await _row(pool, "Completed", "DateBased", recent),
        await _row(pool, "Deactivated", "DateBased", recent),
    ]
    # An operator's cancel is terminal until an operator reopens it: kept.
    manual = await _row(pool, "Cancelled", "DateBased", old)
    await pool.execute(
        "UPDATE automation.scheduler SET status_reason_code = 'ManualCancel' "
        "WHERE scheduler_id = $1",
        manual,
    )
    kept.append(manual)
    # Scheduled long ago but changed recently (e.g. a support action): kept.
    touched = await _row(pool, "Completed", "DateBased", old)
    await pool.execute(
        "UPDATE automation.scheduler SET updated_on = $2 WHERE scheduler_id = $1", touched, recent
    )
    result = await table_retention(pool, Metrics(), batch_size=4).run_once(
        RunContext.at(LATER, clock=SystemClock())
    )
    assert result.deleted["automation.scheduler"] == len(doomed)
    left = {
        r["scheduler_id"] for r in await pool.fetch("SELECT scheduler_id FROM automation.scheduler")
    }
    assert left == {*kept, touched}
    # The Completed ones leave their record: Ensure never inserts their keys again.
    history = {
        r["scheduler_id"]
        for r in await pool.fetch("SELECT scheduler_id FROM automation.scheduler_history")
    }
    assert history == set(doomed[:3])


async def test_a_late_source_version_after_the_scheduler_prune_sends_nothing_again(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """Dated rows past the horizon go; a Completed threshold row (the dedupe of "fired once")
    stays, so a newer source Version planned after the prune ensures nothing again."""
    from devkit.harness.automation import TARGET, setting_msg, source_msg
    from devkit.harness.automation import make_runtime as automation_runtime
    from devkit.harness.automation_inputs import Inputs, by_status, complete, unit_msg
    from streams.contracts.automation import Comparator, FiringPolicy, Threshold, TriggerType

    dated, threshold, source = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    attributes = {"ExpiresOn": TARGET.isoformat(), "Booked": 90}
    fires_once = setting_msg(
        threshold,
        trigger_type=TriggerType.THRESHOLD_CONDITION,
        trigger_key="Capacity",
        offsets_days=[],
        threshold=Threshold(
            metric_key="Booked",
            value=80,
            comparator=Comparator.GTE,
            firing_policy=FiringPolicy.ONCE_PER_SOURCE,
        ),
    )
    before = automation_runtime(database_url)
    await Inputs(before).send(
        unit_msg(), setting_msg(dated), fires_once, source_msg(source, attributes=attributes)
    )
    made = (await by_status(pool))["Pending"]
    assert len(made) == 3  # offsets 30 and 7, and the threshold
    for key in made:
        await complete(pool, key)
    await before.close()

    as_of = datetime(2027, 2, 15, 9, 0, tzinfo=UTC)  # the dated rows 53 and 76 days past
    result = await table_retention(pool, Metrics()).run_once(
        RunContext.at(as_of, clock=SystemClock())
    )
    assert result.deleted["automation.scheduler"] == 2
    (kept,) = (await by_status(pool))["Completed"]
    assert ":threshold:Booked:80:" in kept

    after = automation_runtime(database_url, now=as_of)
    late = source_msg(source, version=2, occurred_at=as_of, attributes={**attributes, "Booked": 95})
    await Inputs(after).send(late)
    await after.close()
    assert await by_status(pool) == {"Completed": {kept}}
