"""Ensure decision table, backoff ladder, revalidation and handler registry (seed 003), pure."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.contracts.automation import AutomationType, Comparator, FiringPolicy, TriggerType
from streams.domain.automation.revalidation import (
    HOLD_INPUT_HASH_MISMATCH,
    ReasonCode,
    SettingState,
    SourceState,
    SubscriptionState,
    VerdictKind,
    revalidate_reminder,
    revalidate_report,
)
from streams.domain.automation.rules import (
    DAILY_RETRY,
    DEFAULT_BACKOFF,
    DEFAULT_INTERRUPTION_ALLOWANCE,
    DEFAULT_INTERRUPTION_DELAY,
    MANUAL_CANCEL,
    REACTIVATABLE,
    EnsureOutcome,
    ReminderDateInput,
    ReminderThresholdInput,
    ReportManualInput,
    ReportScheduledInput,
    RetryPlan,
    RowState,
    SchedulerCandidate,
    SchedulerStatus,
    ensure_decision,
    input_hash,
    interruption_plan,
    parse_ladder,
    retry_plan,
    unique_by_key,
)
from streams.settings import ConfigError, Settings
from streams.slices.automation.cli import CandidateSpec
from streams.slices.automation.config import AutomationConfig
from streams.slices.automation.handlers import HandlerRegistry, ReminderHandler, default_handlers

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SETTING, SOURCE = uuid4(), uuid4()
DATE_INPUT = ReminderDateInput(SETTING, "Doc", SOURCE, "ExpiresOn", date(2026, 12, 31), 30)
CANDIDATE = SchedulerCandidate(DATE_INPUT, NOW, date(2026, 12, 1), "UTC")


def row(status: SchedulerStatus, **changes: Any) -> RowState:
    base: dict[str, Any] = {
        "status": status,
        "input_hash": CANDIDATE.input_hash,
        "scheduled_on": CANDIDATE.scheduled_on,
        "scheduled_local_date": CANDIDATE.scheduled_local_date,
        "time_zone_id": CANDIDATE.time_zone_id,
    }
    return RowState(**{**base, **changes})


# --- Ensure: every row of the seed's table ---------------------------------------------------


def test_no_row_inserts() -> None:
    assert ensure_decision(None, CANDIDATE) is EnsureOutcome.INSERTED


@pytest.mark.parametrize(
    "status", [SchedulerStatus.FAILED, SchedulerStatus.DEACTIVATED, SchedulerStatus.CANCELLED]
)
def test_compatible_inactive_row_is_reactivated(status: SchedulerStatus) -> None:
    assert ensure_decision(row(status), CANDIDATE) is EnsureOutcome.REACTIVATED


@pytest.mark.parametrize("input_hash", [CANDIDATE.input_hash, "0" * 64])
def test_an_operators_cancel_is_terminal_whatever_the_input(input_hash: str) -> None:
    """A console cancel (ManualCancel) is neither reactivated nor held by an input; a
    system cancellation (any other reason) is reactivated as before."""
    cancelled = row(SchedulerStatus.CANCELLED, input_hash=input_hash, reason_code=MANUAL_CANCEL)
    assert ensure_decision(cancelled, CANDIDATE) is EnsureOutcome.OPERATOR_CANCELLED
    withdrawn = row(SchedulerStatus.CANCELLED, reason_code="Withdrawn")
    assert ensure_decision(withdrawn, CANDIDATE) is EnsureOutcome.REACTIVATED


def test_compatible_pending_row_is_updated_in_place_or_left_alone() -> None:
    assert ensure_decision(row(SchedulerStatus.PENDING), CANDIDATE) is EnsureOutcome.UNCHANGED
    later = row(SchedulerStatus.PENDING, scheduled_on=NOW + timedelta(hours=1))
    assert ensure_decision(later, CANDIDATE) is EnsureOutcome.UPDATED


def test_completed_row_returns_coordinates_and_is_never_resent() -> None:
    assert (
        ensure_decision(row(SchedulerStatus.COMPLETED), CANDIDATE)
        is EnsureOutcome.ALREADY_COMPLETED
    )


def test_processing_row_is_left_to_its_claim() -> None:
    assert ensure_decision(row(SchedulerStatus.PROCESSING), CANDIDATE) is EnsureOutcome.IN_FLIGHT


@pytest.mark.parametrize("status", sorted(set(SchedulerStatus) - {SchedulerStatus.COMPLETED}))
def test_same_key_different_hash_is_a_conflict_on_a_live_row(
    status: SchedulerStatus,
) -> None:
    assert ensure_decision(row(status, input_hash="0" * 64), CANDIDATE) is EnsureOutcome.CONFLICT


def test_completed_row_with_a_different_hash_returns_its_coordinates() -> None:
    state = row(SchedulerStatus.COMPLETED, input_hash="0" * 64)
    assert ensure_decision(state, CANDIDATE) is EnsureOutcome.ALREADY_COMPLETED


def test_one_batch_keeps_one_candidate_per_key_the_last_schedule_winning() -> None:
    later = SchedulerCandidate(DATE_INPUT, NOW + timedelta(hours=1))
    other = SchedulerCandidate(ReportManualInput(uuid4(), uuid4()), NOW)
    assert unique_by_key([CANDIDATE, other, later]) == [later, other]


# --- backoff ladder: 5 min → 15 min → 1 h → support hold -------------------------------------


def test_each_step_of_the_ladder() -> None:
    clock = NOW
    step1 = retry_plan(0, clock)
    assert (step1.retry_count, step1.status, step1.next_retry_on, step1.hold) == (
        1,
        SchedulerStatus.PENDING,
        clock + timedelta(minutes=5),
        False,
    )
    clock = step1.next_retry_on + timedelta(seconds=3)
    step2 = retry_plan(step1.retry_count, clock)
    assert (step2.retry_count, step2.next_retry_on) == (2, clock + timedelta(minutes=15))
    clock = step2.next_retry_on
    step3 = retry_plan(step2.retry_count, clock)
    assert (step3.retry_count, step3.next_retry_on) == (3, clock + timedelta(hours=1))
    step4 = retry_plan(step3.retry_count, clock + timedelta(hours=1))
    assert (step4.retry_count, step4.status, step4.next_retry_on, step4.hold) == (
        4,
        SchedulerStatus.FAILED,
        None,
        True,
    )


def test_only_an_approved_long_running_handler_retries_daily_instead_of_hold() -> None:
    step = retry_plan(3, NOW, daily_retry=True)
    assert (step.status, step.next_retry_on, step.hold) == (
        SchedulerStatus.PENDING,
        NOW + DAILY_RETRY,
        False,
    )
    assert retry_plan(9, NOW, daily_retry=True).next_retry_on == NOW + DAILY_RETRY


# --- interruptions: no verdict is not a failed attempt, up to the allowance ------------------


def test_interruptions_within_the_allowance_keep_the_ladder_position() -> None:
    for n in range(DEFAULT_INTERRUPTION_ALLOWANCE):
        plan = interruption_plan(2, n, NOW)
        assert (plan.interrupted_count, plan.charged) == (n + 1, False)
        assert plan.step == RetryPlan(
            2, SchedulerStatus.PENDING, NOW + DEFAULT_INTERRUPTION_DELAY, False
        )


def test_past_the_allowance_an_interruption_is_an_attempt_on_the_ladder() -> None:
    plan = interruption_plan(0, DEFAULT_INTERRUPTION_ALLOWANCE, NOW)
    assert (plan.interrupted_count, plan.charged) == (DEFAULT_INTERRUPTION_ALLOWANCE + 1, True)
    assert plan.step == retry_plan(0, NOW)
    held = interruption_plan(3, 99, NOW)
    assert (held.step.status, held.step.hold, held.step.retry_count) == (
        SchedulerStatus.FAILED,
        True,
        4,
    )
    daily = interruption_plan(3, 99, NOW, daily_retry=True)
    assert (daily.step.hold, daily.step.next_retry_on) == (False, NOW + DAILY_RETRY)


@given(st.integers(0, 20), st.integers(0, 10), st.integers(0, 200))
def test_a_row_without_verdicts_is_held_after_allowance_plus_ladder_interruptions(
    allowance: int, retry_count: int, extra: int
) -> None:
    """Whatever the start, interruptions alone end on hold, and never sooner than the
    allowance: at most ``allowance + len(ladder) + 1`` of them."""
    retries, interrupted, steps = min(retry_count, 3), 0, 0
    while True:
        plan = interruption_plan(retries, interrupted, NOW, allowance=allowance)
        steps += 1
        retries, interrupted = plan.step.retry_count, plan.interrupted_count
        if plan.step.hold:
            break
        assert steps <= allowance + 4
    assert allowance < steps <= allowance + 4
    assert interruption_plan(0, 0, NOW, allowance=allowance + extra + 1).charged is False


@given(st.integers(0, 50), st.lists(st.integers(1, 10**6), min_size=1, max_size=6))
def test_ladder_waits_never_shrink_past_the_configured_steps(n: int, seconds: list[int]) -> None:
    ladder = tuple(timedelta(seconds=s) for s in seconds)
    plan = retry_plan(n, NOW, ladder)
    assert plan.retry_count == n + 1
    if n < len(ladder):
        assert plan.next_retry_on == NOW + ladder[n] and not plan.hold
    else:
        assert plan.hold and plan.next_retry_on is None


def test_ladder_setting_is_parsed_and_checked() -> None:
    assert parse_ladder("300, 900,3600") == DEFAULT_BACKOFF
    for bad in ("", "300,,900", "0", "-5", "abc", "nan"):
        with pytest.raises(ValueError):
            parse_ladder(bad)


def test_bad_settings_stop_startup_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="AUTOMATION_BACKOFF_SECONDS"):
        AutomationConfig.from_settings(Settings(automation_backoff_seconds="5m"))
    config = AutomationConfig.from_settings(Settings(automation_lease_seconds=20))
    with pytest.raises(ConfigError, match="AUTOMATION_LEASE_SECONDS"):
        config.check_lease(timedelta(seconds=30), "TIMER_AUTOMATION_SCHEDULER_MAX_DURATION_SECONDS")
    config.check_lease(timedelta(seconds=10), "x")


# --- revalidation ----------------------------------------------------------------------------


def setting(**changes: Any) -> SettingState:
    base: dict[str, Any] = {
        "setting_guid": SETTING,
        "source_type": "Doc",
        "trigger_type": TriggerType.DATE_BASED,
        "trigger_key": "ExpiresOn",
        "offsets_days": (30, 7),
        "active": True,
    }
    return SettingState(**{**base, **changes})


def source(**changes: Any) -> SourceState:
    base: dict[str, Any] = {
        "source_type": "Doc",
        "source_guid": SOURCE,
        "is_active": True,
        "attributes": {"ExpiresOn": "2026-12-31"},
    }
    return SourceState(**{**base, **changes})


HASH = input_hash(DATE_INPUT)


def test_valid_date_reminder_stays_valid() -> None:
    assert revalidate_reminder(DATE_INPUT, HASH, setting(), source()).kind is VerdictKind.VALID
    instant = source(attributes={"ExpiresOn": "2026-12-31T23:00:00+00:00"})
    assert revalidate_reminder(DATE_INPUT, HASH, setting(), instant).kind is VerdictKind.VALID


@pytest.mark.parametrize(
    "current",
    [
        None,
        setting(active=False),
        setting(offsets_days=(7,)),
        setting(trigger_key="StartsOn"),
        setting(source_type="Other"),
        setting(trigger_type=TriggerType.THRESHOLD_CONDITION),
    ],
)
def test_setting_no_longer_yielding_the_row_is_reminder_setting_inactive(
    current: SettingState | None,
) -> None:
    verdict = revalidate_reminder(DATE_INPUT, HASH, current, source())
    assert (verdict.kind, verdict.reason) == (
        VerdictKind.DEACTIVATE,
        ReasonCode.REMINDER_SETTING_INACTIVE.value,
    )


@pytest.mark.parametrize(
    "current",
    [
        None,
        source(is_active=False),
        source(attributes={"ExpiresOn": "2027-01-31"}),
        source(attributes={}),
        source(attributes={"ExpiresOn": 20261231}),
    ],
)
def test_source_no_longer_yielding_the_row_is_source_no_longer_valid(
    current: SourceState | None,
) -> None:
    verdict = revalidate_reminder(DATE_INPUT, HASH, setting(), current)
    assert (verdict.kind, verdict.reason) == (
        VerdictKind.DEACTIVATE,
        ReasonCode.SOURCE_NO_LONGER_VALID.value,
    )


def test_a_rebuilt_hash_that_differs_holds_the_row_instead_of_guessing() -> None:
    verdict = revalidate_reminder(DATE_INPUT, "f" * 64, setting(), source())
    assert (verdict.kind, verdict.reason, verdict.current_hash) == (
        VerdictKind.HOLD,
        HOLD_INPUT_HASH_MISMATCH,
        HASH,
    )


def test_threshold_reminder_revalidation() -> None:
    occ = ReminderThresholdInput(
        SETTING, "Class", SOURCE, "Capacity", "Booked", 90, FiringPolicy.ONCE_PER_SOURCE, "src"
    )
    h = input_hash(occ)
    s = setting(
        source_type="Class",
        trigger_type=TriggerType.THRESHOLD_CONDITION,
        trigger_key="Capacity",
        offsets_days=(),
        threshold_metric_key="Booked",
        threshold_value=90.0,
        threshold_comparator=Comparator.GTE,
        threshold_firing_policy=FiringPolicy.ONCE_PER_SOURCE,
    )
    met = source(source_type="Class", attributes={"Booked": 95})
    assert revalidate_reminder(occ, h, s, met).kind is VerdictKind.VALID
    not_met = source(source_type="Class", attributes={"Booked": 50})
    assert revalidate_reminder(occ, h, s, not_met).reason == ReasonCode.SOURCE_NO_LONGER_VALID
    moved = SettingState(**{**s.__dict__, "threshold_value": 80.0})
    assert revalidate_reminder(occ, h, moved, met).reason == ReasonCode.REMINDER_SETTING_INACTIVE
    policy = SettingState(**{**s.__dict__, "threshold_firing_policy": FiringPolicy.ONCE_PER_DAY})
    assert revalidate_reminder(occ, h, policy, met).reason == ReasonCode.REMINDER_SETTING_INACTIVE


def test_report_runs_need_an_active_subscription() -> None:
    sub = uuid4()
    manual = ReportManualInput(sub, uuid4())
    scheduled = ReportScheduledInput(sub, NOW)
    for occ in (manual, scheduled):
        h = input_hash(occ)
        assert revalidate_report(occ, h, SubscriptionState(sub, True)).kind is VerdictKind.VALID
        for state in (None, SubscriptionState(sub, False)):
            verdict = revalidate_report(occ, h, state)
            assert verdict.reason == ReasonCode.REPORT_SUBSCRIPTION_INACTIVE


# --- handler registry, CLI input -------------------------------------------------------------


def test_handlers_are_registered_by_automation_type_once() -> None:
    registry = default_handlers()
    assert set(registry.types) == {"Reminder", "ReportSubscription"}
    handler = registry.get("Reminder")
    assert handler is not None and handler.automation_type is AutomationType.REMINDER
    assert registry.get("Nope") is None
    with pytest.raises(ValueError, match="already registered"):
        registry.register(ReminderHandler(inputs=None))  # type: ignore[arg-type]
    assert HandlerRegistry().types == ()


def test_cli_candidate_spec_builds_keys_and_names_missing_fields() -> None:
    spec = CandidateSpec.model_validate(
        {
            "TriggerType": "ManualRun",
            "ScheduledOn": "2026-12-01T09:00:00+01:00",
            "SubscriptionGuid": str(UUID(int=1)),
            "ManualRunGuid": str(UUID(int=2)),
        },
        by_alias=True,
    )
    c = spec.candidate()
    assert c.key == f"report-subscription:{UUID(int=1)}:manual:{UUID(int=2)}"
    assert c.scheduled_on == datetime(2026, 12, 1, 8, tzinfo=UTC)
    missing = CandidateSpec.model_validate(
        {"TriggerType": "DateBased", "ScheduledOn": "2026-12-01T09:00:00Z"}, by_alias=True
    )
    with pytest.raises(ValueError, match="SettingGuid, SourceType, SourceGuid, TriggerKey"):
        missing.candidate()
    recurring = CandidateSpec.model_validate(
        {
            "TriggerType": "Recurring",
            "ScheduledOn": "2026-12-03T09:00:00Z",
            "SettingGuid": str(UUID(int=1)),
            "SourceType": "Employee",
            "SourceGuid": str(UUID(int=2)),
            "TriggerKey": "HireDate",
            "TargetDate": "2026-12-10",
            "OffsetDays": 7,
        },
        by_alias=True,
    ).candidate()
    assert recurring.key == f"reminder:{UUID(int=1)}:Employee:{UUID(int=2)}:HireDate:2026-12-10:7"
    assert recurring.trigger_type is TriggerType.RECURRING


# --- properties ------------------------------------------------------------------------------

statuses = st.sampled_from(list(SchedulerStatus))
hashes = st.sampled_from([CANDIDATE.input_hash, "0" * 64])
offsets = st.sampled_from([timedelta(0), timedelta(hours=1)])


@given(statuses, hashes, offsets)
def test_ensure_never_overwrites_a_different_input_nor_resends_a_completed_row(
    status: SchedulerStatus, stored_hash: str, moved: timedelta
) -> None:
    state = row(status, input_hash=stored_hash, scheduled_on=CANDIDATE.scheduled_on + moved)
    outcome = ensure_decision(state, CANDIDATE)
    live = status is not SchedulerStatus.COMPLETED
    assert (outcome is EnsureOutcome.CONFLICT) == (live and stored_hash != CANDIDATE.input_hash)
    writes_schedule = outcome in {EnsureOutcome.REACTIVATED, EnsureOutcome.UPDATED}
    if writes_schedule:
        assert state.status in {SchedulerStatus.PENDING, *REACTIVATABLE}
    if status is SchedulerStatus.COMPLETED:
        assert outcome is EnsureOutcome.ALREADY_COMPLETED
    if status is SchedulerStatus.PROCESSING:
        assert outcome in {EnsureOutcome.IN_FLIGHT, EnsureOutcome.CONFLICT}


@given(
    st.uuids(),
    st.uuids(),
    st.dates(min_value=date(2000, 1, 1), max_value=date(2100, 1, 1)),
    st.lists(st.integers(-30, 400), min_size=1, max_size=5, unique=True),
)
def test_a_setting_and_source_that_yield_the_occurrence_always_revalidate(
    setting_guid: UUID, source_guid: UUID, target: date, offsets_days: list[int]
) -> None:
    for offset in offsets_days:
        occ = ReminderDateInput(setting_guid, "Doc", source_guid, "ExpiresOn", target, offset)
        s = setting(setting_guid=setting_guid, offsets_days=tuple(offsets_days))
        src = source(source_guid=source_guid, attributes={"ExpiresOn": target.isoformat()})
        assert revalidate_reminder(occ, input_hash(occ), s, src).kind is VerdictKind.VALID
        moved = source(
            source_guid=source_guid,
            attributes={"ExpiresOn": (target + timedelta(days=1)).isoformat()},
        )
        assert (
            revalidate_reminder(occ, input_hash(occ), s, moved).reason
            == ReasonCode.SOURCE_NO_LONGER_VALID
        )
