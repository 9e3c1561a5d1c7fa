"""Automation inputs on real PostgreSQL: the seed's settings-change table (one test per row),
out-of-order arrival, replayed and older Versions, report subscriptions."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time, timedelta

import asyncpg
import pytest

from devkit.harness.automation import (
    T0,
    TARGET,
    make_runtime,
    setting_msg,
    source_msg,
    subscription_msg,
)
from devkit.harness.automation_inputs import (
    BU,
    Inputs,
    by_status,
    complete,
    rows,
    unit_msg,
)
from streams.contracts.automation import (
    Comparator,
    FiringPolicy,
    ReminderSettingChanged,
    ReportSubscriptionChanged,
    Threshold,
    TriggerType,
)
from streams.runtime import Runtime

pytestmark = pytest.mark.integration


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    yield rt
    await rt.close()


@pytest.fixture
def inputs(runtime: Runtime) -> Inputs:
    return Inputs(runtime)


def key(setting: uuid.UUID, source: uuid.UUID, offset: int, target: date = TARGET) -> str:
    return f"reminder:{setting}:Doc:{source}:ExpiresOn:{target.isoformat()}:{offset}"


async def start(inputs: Inputs) -> tuple[uuid.UUID, uuid.UUID]:
    setting, source = uuid.uuid4(), uuid.uuid4()
    await inputs.send(unit_msg(), setting_msg(setting), source_msg(source))
    return setting, source


async def test_main_flow_ensures_one_pending_row_per_offset_at_send_time(
    pool: asyncpg.Pool, inputs: Inputs
) -> None:
    setting, source = await start(inputs)
    found = await rows(pool)
    assert set(found) == {key(setting, source, 30), key(setting, source, 7)}
    r = found[key(setting, source, 7)]
    assert (r["status_id"], r["scheduled_on"], r["scheduled_local_date"], r["time_zone_id"]) == (
        "Pending",
        datetime(2026, 12, 24, 9, 0, tzinfo=UTC),
        date(2026, 12, 24),
        "UTC",
    )
    assert inputs.woken and min(c.scheduled_on for c in inputs.woken[-1].candidates) == T0


# --- the seed's settings-change table ------------------------------------------------------


async def test_offset_change_deactivates_and_recreates(pool: asyncpg.Pool, inputs: Inputs) -> None:
    setting, source = await start(inputs)
    await complete(pool, key(setting, source, 30))
    await inputs.send(setting_msg(setting, offsets_days=[30, 14], version=2))
    status = await by_status(pool)
    assert status["Deactivated"] == {key(setting, source, 7)}
    assert status["Pending"] == {key(setting, source, 14)}
    assert status["Completed"] == {key(setting, source, 30)}  # history kept
    r = (await rows(pool))[key(setting, source, 7)]
    assert r["status_reason_code"] == "ReminderSettingInactive"


async def test_target_date_change_deactivates_and_recreates(
    pool: asyncpg.Pool, inputs: Inputs
) -> None:
    setting, source = await start(inputs)
    moved = TARGET + timedelta(days=10)
    await inputs.send(source_msg(source, version=2, attributes={"ExpiresOn": moved.isoformat()}))
    status = await by_status(pool)
    assert status["Deactivated"] == {key(setting, source, 30), key(setting, source, 7)}
    assert status["Pending"] == {key(setting, source, 30, moved), key(setting, source, 7, moved)}
    reasons = {
        r["status_reason_code"]
        for r in (await rows(pool)).values()
        if r["status_id"] == "Deactivated"
    }
    assert reasons == {"SourceNoLongerValid"}


def threshold_setting(
    setting: uuid.UUID,
    value: float,
    version: int = 1,
    policy: FiringPolicy = FiringPolicy.ONCE_PER_SOURCE,
) -> ReminderSettingChanged:
    return setting_msg(
        setting,
        trigger_type=TriggerType.THRESHOLD_CONDITION,
        trigger_key="Capacity",
        offsets_days=[],
        threshold=Threshold(
            metric_key="Booked",
            value=value,
            comparator=Comparator.GTE,
            firing_policy=policy,
        ),
        version=version,
    )


@pytest.mark.parametrize(
    ("policy", "fires_again"),
    [
        (FiringPolicy.ONCE_PER_SOURCE, False),
        (FiringPolicy.ONCE_PER_THRESHOLD, True),
        (FiringPolicy.ONCE_PER_DAY, True),
        (FiringPolicy.FALSE_TO_TRUE, False),
    ],
)
async def test_a_threshold_change_after_the_row_fired_under_each_policy(
    pool: asyncpg.Pool, inputs: Inputs, policy: FiringPolicy, fires_again: bool
) -> None:
    """80 → 85 while Booked (90) meets both, after the 80 row completed: OncePerSource and
    FalseToTrue (same true episode) do not fire again; OncePerThreshold and OncePerDay do."""
    setting, source = uuid.uuid4(), uuid.uuid4()
    await inputs.send(
        unit_msg(),
        threshold_setting(setting, 80, policy=policy),
        source_msg(source, attributes={"Booked": 90}),
    )
    (fired,) = (await by_status(pool))["Pending"]
    assert ":threshold:Booked:80:" in fired
    await complete(pool, fired)
    await inputs.send(threshold_setting(setting, 85, version=2, policy=policy))
    status = await by_status(pool)
    assert status["Completed"] == {fired}
    pending = status.get("Pending", set())
    if fires_again:
        (new,) = pending
        assert ":threshold:Booked:85:" in new
    else:
        assert pending == set()
    # Back to 80: the completed key is returned, never re-sent, under every policy.
    await inputs.send(threshold_setting(setting, 80, version=3, policy=policy))
    status = await by_status(pool)
    assert status["Completed"] == {fired}
    assert status.get("Pending", set()) == set()


async def test_threshold_change_deactivates_and_recreates(
    pool: asyncpg.Pool, inputs: Inputs
) -> None:
    setting, source = uuid.uuid4(), uuid.uuid4()
    await inputs.send(
        unit_msg(), threshold_setting(setting, 80), source_msg(source, attributes={"Booked": 90})
    )
    (old,) = (await by_status(pool))["Pending"]
    assert old.endswith(":threshold:Booked:80:OncePerSource:source")
    await inputs.send(threshold_setting(setting, 85, version=2))
    status = await by_status(pool)
    assert status["Deactivated"] == {old}
    (new,) = status["Pending"]
    assert new.endswith(":threshold:Booked:85:OncePerSource:source")
    # No longer met → deactivated; met again → the same key back (OncePerSource).
    await inputs.send(source_msg(source, version=2, attributes={"Booked": 50}))
    assert new in (await by_status(pool))["Deactivated"]
    await inputs.send(source_msg(source, version=3, attributes={"Booked": 99}))
    assert (await by_status(pool))["Pending"] == {new}


async def test_send_time_change_updates_scheduled_on_in_place(
    pool: asyncpg.Pool, inputs: Inputs
) -> None:
    setting, source = await start(inputs)
    before = await rows(pool)
    await inputs.send(setting_msg(setting, send_time_local=time(17, 30), version=2))
    after = await rows(pool)
    assert set(after) == set(before)
    r = after[key(setting, source, 7)]
    assert (r["status_id"], r["scheduled_on"]) == (
        "Pending",
        datetime(2026, 12, 24, 17, 30, tzinfo=UTC),
    )
    assert r["scheduler_id"] == before[key(setting, source, 7)]["scheduler_id"]


async def test_template_or_delivery_change_leaves_pending_rows_unchanged(
    pool: asyncpg.Pool, inputs: Inputs
) -> None:
    setting, _source = await start(inputs)
    before = await rows(pool)
    wire = setting_msg(setting, version=2).model_dump(mode="json", by_alias=True)
    # Template and delivery are resolved at execution (test_automation_delivery.py checks
    # that the dispatch request carries the new ones); the scheduler rows do not hold them.
    wire |= {"TemplateId": str(uuid.uuid4()), "DeliveryChannels": ["Email", "Push"]}
    changed = ReminderSettingChanged.model_validate(wire)
    assert changed.template_id is not None and changed.delivery_channels  # not dropped
    result = await inputs.send(changed)
    assert result.applied == 1  # the new Version was taken
    after = await rows(pool)
    for k, r in before.items():
        assert (after[k]["version"], after[k]["updated_on"], after[k]["status_id"]) == (
            r["version"],
            r["updated_on"],
            "Pending",
        )


async def test_setting_deactivated_deactivates_pending_and_keeps_completed(
    pool: asyncpg.Pool, inputs: Inputs
) -> None:
    setting, source = await start(inputs)
    await complete(pool, key(setting, source, 30))
    await inputs.send(setting_msg(setting, active=False, version=2))
    status = await by_status(pool)
    assert status == {
        "Completed": {key(setting, source, 30)},
        "Deactivated": {key(setting, source, 7)},
    }
    r = (await rows(pool))[key(setting, source, 7)]
    assert r["status_reason_code"] == "ReminderSettingInactive"
    # Reactivated → the Pending row comes back; the Completed one is never re-sent.
    await inputs.send(setting_msg(setting, active=True, version=3))
    status = await by_status(pool)
    assert status["Pending"] == {key(setting, source, 7)}
    assert status["Completed"] == {key(setting, source, 30)}


async def test_source_deactivated_deactivates_its_rows(pool: asyncpg.Pool, inputs: Inputs) -> None:
    _setting, source = await start(inputs)
    await inputs.send(source_msg(source, is_active=False, version=2))
    assert set(await by_status(pool)) == {"Deactivated"}
    assert {r["status_reason_code"] for r in (await rows(pool)).values()} == {"SourceNoLongerValid"}


# --- out of order, replays -------------------------------------------------------------------


@pytest.mark.parametrize(
    "order",
    [
        ("source", "setting", "unit"),
        ("source", "unit", "setting"),
        ("setting", "source", "unit"),
        ("unit", "source", "setting"),
        ("unit", "setting", "source"),
    ],
)
async def test_arrival_order_converges_to_the_same_rows(
    pool: asyncpg.Pool, inputs: Inputs, order: tuple[str, ...]
) -> None:
    setting, source = uuid.uuid4(), uuid.uuid4()
    messages = {"source": source_msg(source), "setting": setting_msg(setting), "unit": unit_msg()}
    for name in order[:-1]:
        await inputs.send(messages[name])
    assert await rows(pool) == {}  # nothing until the last of the three arrives
    await inputs.send(messages[order[-1]])
    assert (await by_status(pool)) == {
        "Pending": {key(setting, source, 30), key(setting, source, 7)}
    }


async def test_bu_zone_change_moves_scheduled_on(pool: asyncpg.Pool, inputs: Inputs) -> None:
    setting, source = await start(inputs)
    await inputs.send(unit_msg("Australia/Sydney", version=2))
    r = (await rows(pool))[key(setting, source, 7)]
    assert (r["scheduled_on"], r["time_zone_id"]) == (
        datetime(2026, 12, 23, 22, 0, tzinfo=UTC),  # 09:00 AEDT (+11)
        "Australia/Sydney",
    )


async def test_replayed_and_older_versions_are_no_ops(pool: asyncpg.Pool, inputs: Inputs) -> None:
    setting, source = uuid.uuid4(), uuid.uuid4()
    moved = TARGET + timedelta(days=3)
    await inputs.send(unit_msg(), setting_msg(setting))
    await inputs.send(source_msg(source, version=5, attributes={"ExpiresOn": moved.isoformat()}))
    before = await rows(pool)
    result = await inputs.send(
        source_msg(source, version=5, attributes={"ExpiresOn": moved.isoformat()})
    )
    assert (result.applied, result.stale) == (0, 1)
    result = await inputs.send(source_msg(source, version=4))  # older, other date
    assert (result.applied, result.stale) == (0, 1)
    await inputs.send(setting_msg(setting, offsets_days=[1], version=1))  # replayed setting
    await inputs.send(unit_msg("Asia/Tokyo", version=1))  # older BU state
    assert await rows(pool) == before
    assert set(before) == {key(setting, source, 30, moved), key(setting, source, 7, moved)}


# --- report subscriptions --------------------------------------------------------------------


async def test_report_scheduled_runs_one_row_per_period_in_window_and_manual_runs(
    pool: asyncpg.Pool, inputs: Inputs
) -> None:
    sub = uuid.uuid4()
    await inputs.send(unit_msg("Europe/Berlin"), subscription_msg(sub))
    found = await rows(pool)
    assert len(found) == 7  # Daily, 7-day window
    first = min(r["scheduled_on"] for r in found.values())
    assert first == datetime(2026, 12, 1, 23, 0, tzinfo=UTC)  # Dec 2 00:00 Berlin
    assert f"report-subscription:{sub}:scheduled:20261201T230000Z" in found
    run = uuid.uuid4()
    await inputs.send(
        ReportSubscriptionChanged(
            subscription_guid=sub, business_unit_id=BU, active=True, version=2, manual_run_guid=run
        )
    )
    manual = (await rows(pool))[f"report-subscription:{sub}:manual:{run}"]
    assert (manual["trigger_type_id"], manual["status_id"], manual["scheduled_on"]) == (
        "ManualRun",
        "Pending",
        T0,
    )
    # The manual-only message did not touch the schedule: the 7 scheduled rows stay Pending.
    assert len((await by_status(pool))["Pending"]) == 8
    await inputs.send(subscription_msg(sub, period="Weekly", version=3))
    status = await by_status(pool)
    weekly = [k for k in status["Pending"] if ":scheduled:" in k]
    assert len(weekly) == 1 and len(status["Deactivated"]) == 6  # Dec 7 (a Monday) kept
    await inputs.send(subscription_msg(sub, active=False, version=4))
    assert {
        r["status_reason_code"]
        for r in (await rows(pool)).values()
        if r["status_id"] == "Deactivated" and ":scheduled:" in r["scheduler_key"]
    } == {"ReportSubscriptionInactive"}


async def test_source_moving_to_another_bu_follows_that_bus_settings(
    pool: asyncpg.Pool, inputs: Inputs
) -> None:
    setting, source = await start(inputs)
    other_bu, other_setting = uuid.uuid4(), uuid.uuid4()
    await inputs.send(
        unit_msg("Asia/Tokyo", bu=other_bu),
        setting_msg(other_setting, business_unit_id=other_bu, offsets_days=[3]),
    )
    await inputs.send(source_msg(source, business_unit_id=other_bu, version=2))
    status = await by_status(pool)
    assert status["Deactivated"] == {key(setting, source, 30), key(setting, source, 7)}
    assert status["Pending"] == {key(other_setting, source, 3)}
    r = (await rows(pool))[key(other_setting, source, 3)]
    assert (r["time_zone_id"], r["scheduled_on"]) == (
        "Asia/Tokyo",
        datetime(2026, 12, 28, 0, 0, tzinfo=UTC),  # Dec 28 09:00 JST
    )


async def test_a_subscription_with_a_bad_cron_is_refused_as_input_not_retried(
    pool: asyncpg.Pool, inputs: Inputs
) -> None:
    from db.connector import classify

    sub = uuid.uuid4()
    await inputs.send(unit_msg())
    with pytest.raises(ValueError, match="cron") as caught:
        await inputs.send(subscription_msg(sub, period=None, cron="61 * * * *"))
    # Not a database error: the consumer dead-letters it ("processing") instead of retrying.
    assert classify(caught.value) is None
    assert await rows(pool) == {}
    assert await pool.fetchval("SELECT count(*) FROM automation.report_subscriptions") == 0


async def test_an_unbuildable_occurrence_never_blocks_the_setting_or_other_sources(
    pool: asyncpg.Pool, inputs: Inputs
) -> None:
    setting, odd, fine = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    await inputs.send(
        unit_msg(),
        # A date at the end of the calendar with a negative offset: beyond date.max.
        source_msg(odd, attributes={"ExpiresOn": "9999-12-31"}),
        source_msg(fine),
    )
    result = await inputs.send(setting_msg(setting, offsets_days=[-5, 7]))
    assert result.applied == 1  # the setting was taken, not refused
    assert set(await rows(pool)) == {key(setting, fine, -5), key(setting, fine, 7)}
    # A trigger key whose percent-encoded form makes the SchedulerKey over 1024 characters.
    long_key = "期" * 128
    other = uuid.uuid4()
    result = await inputs.send(
        setting_msg(other, trigger_key=long_key, offsets_days=[1]),
    )
    assert result.applied == 1
    assert not any(str(other) in k for k in await rows(pool))


async def test_a_subscription_state_with_cron_period_and_manual_run_is_planned(
    pool: asyncpg.Pool, inputs: Inputs
) -> None:
    sub, run = uuid.uuid4(), uuid.uuid4()
    await inputs.send(unit_msg())
    both = subscription_msg(sub, cron="0 9 * * *", period="Weekly", manual_run_guid=run)
    result = await inputs.send(both)
    assert result.applied == 1
    found = await rows(pool)
    assert f"report-subscription:{sub}:manual:{run}" in found
    scheduled = sorted(r["scheduled_on"] for k, r in found.items() if ":scheduled:" in k)
    assert len(scheduled) == 7 and scheduled[0].hour == 9  # the Cron wins over the Period


async def test_the_dispatched_threshold_lookup_reads_its_partial_index(
    pool: asyncpg.Pool, inputs: Inputs
) -> None:
    from db.queries import sql

    setting, source = uuid.uuid4(), uuid.uuid4()
    await inputs.send(
        unit_msg(), threshold_setting(setting, 80), source_msg(source, attributes={"Booked": 90})
    )
    async with pool.acquire() as conn:
        await conn.execute("ANALYZE automation.scheduler")
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(
            r[0]
            for r in await conn.fetch(
                "EXPLAIN " + sql("scheduler_dispatched_of_thresholds"),
                [setting],
                ["Doc"],
                [source],
            )
        )
    assert "ix_scheduler_threshold_dispatched" in plan
