"""Trigger providers (seed 003 stage ①): DateBased with the DST rule, ThresholdCondition with
its four firing policies, report periods, the provider registry."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.contracts.automation import (
    Comparator,
    FiringPolicy,
    ReminderSettingChanged,
    ReportPeriod,
    SourceEntityChanged,
    Threshold,
    TriggerType,
)
from streams.domain.automation.recurring import RecurringInvalidation, RecurringProvider
from streams.domain.automation.reports import check_cron, period_starts, scheduled_runs
from streams.domain.automation.rules import parse_scheduler_key
from streams.domain.automation.triggers import (
    DateBasedProvider,
    ProviderRegistry,
    StaleOccurrences,
    ThresholdMemory,
    ThresholdProvider,
    TriggerInput,
    default_providers,
    local_to_utc,
)

BU = uuid.UUID("00000000-0000-0000-0000-0000000000b1")
SETTING = uuid.UUID("00000000-0000-0000-0000-00000000005e")
SOURCE = uuid.UUID("00000000-0000-0000-0000-0000000000a1")
AS_OF = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)


def date_setting(
    offsets: list[int], send: time = time(9, 0), **kw: object
) -> ReminderSettingChanged:
    return ReminderSettingChanged(
        setting_guid=SETTING,
        business_unit_id=BU,
        source_type="PoliceVetting",
        trigger_type=TriggerType.DATE_BASED,
        trigger_key="ExpiryDate",
        offsets_days=offsets,
        send_time_local=send,
        active=True,
        version=1,
        **kw,  # type: ignore[arg-type]
    )


def source(
    attrs: dict[str, object], version: int = 1, at: datetime = AS_OF, active: bool = True
) -> SourceEntityChanged:
    return SourceEntityChanged(
        source_type="PoliceVetting",
        source_guid=SOURCE,
        business_unit_id=BU,
        version=version,
        occurred_at=at,
        is_active=active,
        attributes=attrs,
    )


# --- DST -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "day", "send", "expected_utc"),
    [
        # Spring-forward gap: 02:30 does not exist; sent when the gap ends (03:00 local).
        (
            "America/New_York",
            date(2026, 3, 8),
            time(2, 30),
            datetime(2026, 3, 8, 7, 0, tzinfo=UTC),
        ),
        ("Europe/Berlin", date(2026, 3, 29), time(2, 30), datetime(2026, 3, 29, 1, 0, tzinfo=UTC)),
        # Fall-back overlap: 01:30 (NY) / 02:30 (Berlin) happen twice; the first one is used.
        (
            "America/New_York",
            date(2026, 11, 1),
            time(1, 30),
            datetime(2026, 11, 1, 5, 30, tzinfo=UTC),
        ),
        (
            "Europe/Berlin",
            date(2026, 10, 25),
            time(2, 30),
            datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        ),
        # Ordinary days either side.
        ("America/New_York", date(2026, 1, 5), time(9, 0), datetime(2026, 1, 5, 14, 0, tzinfo=UTC)),
        ("Europe/Berlin", date(2026, 7, 1), time(9, 0), datetime(2026, 7, 1, 7, 0, tzinfo=UTC)),
    ],
)
def test_dst_gap_sends_at_its_end_and_overlap_takes_first_occurrence(
    zone: str, day: date, send: time, expected_utc: datetime
) -> None:
    assert local_to_utc(day, send, zone) == expected_utc


def test_dst_gap_send_time_lands_after_the_jump_in_local_time() -> None:
    from zoneinfo import ZoneInfo

    at = local_to_utc(date(2026, 3, 8), time(2, 30), "America/New_York")
    assert at.astimezone(ZoneInfo("America/New_York")).time() == time(3, 0)
    at = local_to_utc(date(2026, 11, 1), time(1, 30), "America/New_York")
    assert at.astimezone(ZoneInfo("America/New_York")).utcoffset() == timedelta(hours=-4)


# --- DateBased -------------------------------------------------------------------------------


def test_date_based_one_row_per_offset_at_send_time_in_bu_zone() -> None:
    result = DateBasedProvider().evaluate(
        TriggerInput(
            date_setting([30, 7]), source({"ExpiryDate": "2026-03-15"}), "Europe/Berlin", AS_OF
        )
    )
    by_offset = {parse_scheduler_key(c.key).offset_days: c for c in result.ensure}  # type: ignore[union-attr]
    assert set(by_offset) == {30, 7}
    assert by_offset[30].scheduled_local_date == date(2026, 2, 13)
    assert by_offset[30].scheduled_on == datetime(2026, 2, 13, 8, 0, tzinfo=UTC)
    assert by_offset[7].scheduled_on == datetime(2026, 3, 8, 8, 0, tzinfo=UTC)
    assert by_offset[7].time_zone_id == "Europe/Berlin"
    assert result.valid == {c.key for c in result.ensure}


def test_date_based_past_occurrence_is_valid_but_not_ensured() -> None:
    result = DateBasedProvider().evaluate(
        TriggerInput(date_setting([30, 1]), source({"ExpiryDate": "2026-01-20"}), "UTC", AS_OF)
    )
    assert len(result.valid) == 2
    assert [c.scheduled_local_date for c in result.ensure] == [date(2026, 1, 19)]


@pytest.mark.parametrize(
    "src",
    [
        source({}),
        source({"ExpiryDate": "not a date"}),
        source({"ExpiryDate": "2026-03-15"}, active=False),
    ],
)
def test_date_based_nothing_without_a_target_or_active_source(src: SourceEntityChanged) -> None:
    result = DateBasedProvider().evaluate(TriggerInput(date_setting([7]), src, "UTC", AS_OF))
    assert not result.valid and not result.ensure


def test_send_time_change_keeps_keys_and_moves_scheduled_on() -> None:
    src = source({"ExpiryDate": "2026-03-15"})
    a = DateBasedProvider().evaluate(TriggerInput(date_setting([7]), src, "UTC", AS_OF))
    b = DateBasedProvider().evaluate(
        TriggerInput(date_setting([7], time(17, 0)), src, "UTC", AS_OF)
    )
    assert a.valid == b.valid
    assert a.ensure[0].scheduled_on + timedelta(hours=8) == b.ensure[0].scheduled_on


@given(
    st.integers(min_value=0, max_value=365),
    st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Sydney"]),
)
def test_date_based_local_date_is_target_minus_offset(offset: int, zone: str) -> None:
    result = DateBasedProvider().evaluate(
        TriggerInput(date_setting([offset]), source({"ExpiryDate": "2027-06-30"}), zone, AS_OF)
    )
    (c,) = result.ensure
    assert c.scheduled_local_date == date(2027, 6, 30) - timedelta(days=offset)
    assert c.key == next(iter(result.valid))


# --- ThresholdCondition ----------------------------------------------------------------------


def threshold_setting(policy: FiringPolicy, value: float = 80) -> ReminderSettingChanged:
    return ReminderSettingChanged(
        setting_guid=SETTING,
        business_unit_id=BU,
        source_type="PoliceVetting",
        trigger_type=TriggerType.THRESHOLD_CONDITION,
        trigger_key="Capacity",
        threshold=Threshold(
            metric_key="BookedPercent", value=value, comparator=Comparator.GTE, firing_policy=policy
        ),
        active=True,
        version=1,
    )


def run(policy: FiringPolicy, metrics: list[tuple[float, datetime]]) -> list[frozenset[str]]:
    """Evaluate a sequence of source states, carrying the memory; the keys at each step."""
    memory: ThresholdMemory | None = None
    out = []
    for version, (metric, at) in enumerate(metrics, start=1):
        result = ThresholdProvider().evaluate(
            TriggerInput(
                threshold_setting(policy),
                source({"BookedPercent": metric}, version=version, at=at),
                "Europe/Berlin",
                at,
                memory,
            )
        )
        memory = result.memory
        out.append(result.valid)
    return out


D1 = datetime(2026, 1, 10, 9, 0, tzinfo=UTC)
D2 = datetime(2026, 1, 11, 9, 0, tzinfo=UTC)


def test_threshold_key_format_carries_policy_and_scope() -> None:
    (keys,) = run(FiringPolicy.ONCE_PER_SOURCE, [(85, D1)])
    (key,) = keys
    assert key.endswith(":threshold:BookedPercent:80:OncePerSource:source")


@pytest.mark.parametrize("policy", [FiringPolicy.ONCE_PER_SOURCE, FiringPolicy.ONCE_PER_THRESHOLD])
def test_once_per_source_and_threshold_keep_one_key_through_false_and_days_for_one_value(
    policy: FiringPolicy,
) -> None:
    steps = run(policy, [(85, D1), (50, D1 + timedelta(hours=1)), (90, D2)])
    assert steps[1] == frozenset()  # not met → no valid key (the open row is deactivated)
    assert steps[0] == steps[2] and len(steps[0]) == 1  # met again → the same key: no second send


def test_once_per_day_new_key_each_local_day_same_key_within_a_day() -> None:
    steps = run(FiringPolicy.ONCE_PER_DAY, [(85, D1), (90, D1 + timedelta(hours=2)), (95, D2)])
    assert steps[0] == steps[1]
    assert steps[2] != steps[0]
    assert next(iter(steps[2])).endswith(":OncePerDay:2026-01-11")


def test_false_to_true_fires_again_only_after_false_in_between() -> None:
    steps = run(
        FiringPolicy.FALSE_TO_TRUE,
        [(85, D1), (90, D1 + timedelta(hours=1)), (50, D1 + timedelta(hours=2)), (95, D2)],
    )
    assert steps[0] == steps[1]  # still true: same episode, no new key
    assert steps[2] == frozenset()
    assert steps[3] != steps[0] and len(steps[3]) == 1  # true again after a false: new key
    assert next(iter(steps[0])).endswith(":FalseToTrue:rise-v1")
    assert next(iter(steps[3])).endswith(":FalseToTrue:rise-v4")


def test_threshold_value_change_is_a_new_identity() -> None:
    src = source({"BookedPercent": 95})
    a = ThresholdProvider().evaluate(
        TriggerInput(threshold_setting(FiringPolicy.ONCE_PER_SOURCE, 80), src, "UTC", AS_OF)
    )
    b = ThresholdProvider().evaluate(
        TriggerInput(threshold_setting(FiringPolicy.ONCE_PER_SOURCE, 90), src, "UTC", AS_OF)
    )
    assert a.valid and b.valid and a.valid != b.valid


def evaluate_at(
    policy: FiringPolicy,
    value: float,
    metric: float,
    memory: ThresholdMemory | None,
    dispatched: frozenset[str],
    version: int = 1,
) -> tuple[frozenset[str], tuple[str, ...], ThresholdMemory | None]:
    result = ThresholdProvider().evaluate(
        TriggerInput(
            threshold_setting(policy, value),
            source({"BookedPercent": metric}, version=version),
            "UTC",
            AS_OF,
            memory,
            dispatched,
        )
    )
    return result.valid, tuple(c.key for c in result.ensure), result.memory


# A threshold change (80 → 90) while the metric (95) meets both, after the 80 row was
# dispatched: fires again?
THRESHOLD_CHANGE = [
    (FiringPolicy.ONCE_PER_SOURCE, False),
    (FiringPolicy.ONCE_PER_THRESHOLD, True),
    (FiringPolicy.ONCE_PER_DAY, True),
    (FiringPolicy.FALSE_TO_TRUE, False),
]


@pytest.mark.parametrize(("policy", "fires_again"), THRESHOLD_CHANGE)
def test_a_threshold_change_under_each_firing_policy(
    policy: FiringPolicy, fires_again: bool
) -> None:
    valid, ensure, memory = evaluate_at(policy, 80, 95, None, frozenset())
    (first,) = ensure
    assert valid == {first}
    dispatched = frozenset({first})
    # The value is in every key: the new value is a new key (the old row is not yielded).
    valid, ensure, memory = evaluate_at(policy, 90, 95, memory, dispatched)
    (second,) = valid
    assert second != first and ":90:" in second
    assert ensure == ((second,) if fires_again else ())
    # Back to the value that fired: its own key, which Ensure returns Completed (never re-sent).
    valid, ensure, _ = evaluate_at(policy, 80, 95, memory, dispatched)
    assert ensure == (first,)


def test_once_per_source_fires_once_whatever_the_value_until_nothing_was_dispatched() -> None:
    # Before anything was dispatched a changed value simply replaces the pending occurrence.
    _, ensure, _ = evaluate_at(FiringPolicy.ONCE_PER_SOURCE, 90, 95, None, frozenset())
    assert len(ensure) == 1
    # Another setting's or another metric's dispatched row does not count.
    other = ThresholdProvider().evaluate(
        TriggerInput(
            threshold_setting(FiringPolicy.ONCE_PER_SOURCE, 80).model_copy(
                update={"setting_guid": uuid.uuid4()}
            ),
            source({"BookedPercent": 95}),
            "UTC",
            AS_OF,
        )
    )
    _, ensure, _ = evaluate_at(FiringPolicy.ONCE_PER_SOURCE, 90, 95, None, other.valid)
    assert len(ensure) == 1


def test_false_to_true_fires_for_a_new_edge_under_the_new_value() -> None:
    policy = FiringPolicy.FALSE_TO_TRUE
    _, (first,), memory = evaluate_at(policy, 80, 95, None, frozenset())
    dispatched = frozenset({first})
    _, ensure, memory = evaluate_at(policy, 90, 95, memory, dispatched)
    assert ensure == ()  # same true episode
    _, ensure, memory = evaluate_at(policy, 90, 50, memory, dispatched, version=2)
    assert ensure == ()  # false
    _, (again,), _ = evaluate_at(policy, 90, 95, memory, dispatched, version=3)
    assert again.endswith(":90:FalseToTrue:rise-v3")


# --- registry, invalidation ------------------------------------------------------------------


def test_registry_routes_by_name_and_refuses_duplicates() -> None:
    registry = default_providers()
    assert isinstance(registry.trigger("DateBased"), DateBasedProvider)
    assert isinstance(registry.trigger("ThresholdCondition"), ThresholdProvider)
    assert isinstance(registry.trigger("Recurring"), RecurringProvider)
    assert isinstance(registry.invalidation("Recurring"), RecurringInvalidation)
    assert isinstance(registry.invalidation("DateBased"), StaleOccurrences)
    with pytest.raises(ValueError):
        registry.register(DateBasedProvider(), StaleOccurrences())
    assert ProviderRegistry().trigger("DateBased") is None


def test_invalidation_reasons() -> None:
    inv = StaleOccurrences()
    assert inv.reasons(["k"], None, True) == {"k": "ReminderSettingInactive"}
    inactive = date_setting([7]).model_copy(update={"active": False})
    assert inv.reasons(["k"], inactive, True) == {"k": "ReminderSettingInactive"}
    assert inv.reasons(["k"], date_setting([7]), False) == {"k": "SourceNoLongerValid"}
    date_key = next(
        iter(
            DateBasedProvider()
            .evaluate(
                TriggerInput(date_setting([7]), source({"ExpiryDate": "2026-03-15"}), "UTC", AS_OF)
            )
            .valid
        )
    )
    # The setting still has offset 7 → the source moved; it dropped offset 7 → the setting did.
    assert inv.reasons([date_key], date_setting([7]), True) == {date_key: "SourceNoLongerValid"}
    assert inv.reasons([date_key], date_setting([14]), True) == {
        date_key: "ReminderSettingInactive"
    }


# --- reports ---------------------------------------------------------------------------------


def test_daily_weekly_monthly_periods_start_at_local_midnight() -> None:
    start = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    end = start + timedelta(days=35)
    daily = period_starts(ReportPeriod.DAILY, None, "Europe/Berlin", start, end)
    assert daily[0] == datetime(2026, 1, 1, 23, 0, tzinfo=UTC)  # Jan 2 00:00 Berlin
    assert len(daily) == 35
    weekly = period_starts(ReportPeriod.WEEKLY, None, "Europe/Berlin", start, end)
    assert all(
        t.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Berlin")).isoweekday() == 1
        for t in weekly
    )
    monthly = period_starts(ReportPeriod.MONTHLY, None, "Europe/Berlin", start, end)
    assert monthly == [datetime(2026, 1, 31, 23, 0, tzinfo=UTC)]


def test_cron_in_bu_zone_and_keys() -> None:
    start = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)  # a Monday
    guid = uuid.uuid4()
    runs = scheduled_runs(
        guid, None, "30 7 * * 1,5", "America/New_York", start, start + timedelta(days=7)
    )
    assert [c.scheduled_on for c in runs] == [
        datetime(2026, 1, 5, 12, 30, tzinfo=UTC),
        datetime(2026, 1, 9, 12, 30, tzinfo=UTC),
    ]
    assert runs[0].key == f"report-subscription:{guid}:scheduled:20260105T123000Z"


@pytest.mark.parametrize("bad", ["* * *", "61 * * * *", "x * * * *"])
def test_bad_cron_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        check_cron(bad)


@given(st.lists(st.booleans(), min_size=1, max_size=30))
def test_false_to_true_one_key_per_rising_edge(conditions: list[bool]) -> None:
    at = [D1 + timedelta(hours=i) for i in range(len(conditions))]
    steps = run(
        FiringPolicy.FALSE_TO_TRUE,
        [(95 if c else 10, t) for c, t in zip(conditions, at, strict=True)],
    )
    rises = sum(1 for i, c in enumerate(conditions) if c and (i == 0 or not conditions[i - 1]))
    keys = {k for s in steps for k in s}
    assert len(keys) == rises
    for c, s in zip(conditions, steps, strict=True):
        assert len(s) == (1 if c else 0)


@given(st.lists(st.booleans(), min_size=1, max_size=30))
def test_once_per_source_never_more_than_one_key(conditions: list[bool]) -> None:
    at = [D1 + timedelta(hours=i) for i in range(len(conditions))]
    steps = run(
        FiringPolicy.ONCE_PER_SOURCE,
        [(95 if c else 10, t) for c, t in zip(conditions, at, strict=True)],
    )
    assert len({k for s in steps for k in s}) == (1 if any(conditions) else 0)


def test_reconcile_allowlist_setting_is_validated() -> None:
    from streams.settings import ConfigError
    from streams.slices.automation.reconcile import ReconcileConfig

    guid = uuid.uuid4()
    assert ReconcileConfig.parse_units(f" {guid}, ") == (guid,)
    assert ReconcileConfig.parse_units("") == ()
    with pytest.raises(ConfigError, match="AUTOMATION_RECONCILE_UNITS"):
        ReconcileConfig.parse_units("not-a-guid")
