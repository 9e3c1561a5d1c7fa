"""Execution-time revalidation (seed 003): a due row is checked against the current setting
and source (or report subscription) before it is handed over. Pure: states in, verdict out.

The check rebuilds the input the *current* state yields for the row's occurrence (the
occurrence identity is read back from the SchedulerKey) and compares its InputHash with the
row's. A setting or source that no longer yields the occurrence deactivates the row with a
ReasonCode — an outcome, not a failure:

| what changed | verdict |
|---|---|
| setting missing or inactive; TriggerType/TriggerKey/SourceType changed; the row's offset no longer in OffsetsDays; threshold metric/value/policy changed | Deactivated, ``ReminderSettingInactive`` |
| source missing or inactive; its target date (the attribute TriggerKey names) moved or is gone; its metric no longer meets the threshold | Deactivated, ``SourceNoLongerValid`` |
| report subscription missing or inactive | Deactivated, ``ReportSubscriptionInactive`` |
| all of the above hold, yet the rebuilt InputHash differs (normalization drift) | support hold, ``InputHashMismatch`` (never sent on a guess) |

Minimal metric rule until the ThresholdCondition provider brings its calculators: the
metric is the numeric source attribute named by MetricKey.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

from streams.contracts.automation import Comparator, FiringPolicy, TriggerType
from streams.domain.automation.rules import (
    AutomationInput,
    ReminderDateInput,
    ReminderThresholdInput,
    ReportManualInput,
    ReportScheduledInput,
    input_hash,
    norm_number,
    norm_text,
)


class ReasonCode(StrEnum):
    """Why a row was deactivated at execution (or by its source domain)."""

    SOURCE_NO_LONGER_VALID = "SourceNoLongerValid"
    REMINDER_SETTING_INACTIVE = "ReminderSettingInactive"
    REPORT_SUBSCRIPTION_INACTIVE = "ReportSubscriptionInactive"


HOLD_INPUT_HASH_MISMATCH = "InputHashMismatch"


@dataclass(frozen=True)
class SettingState:
    setting_guid: UUID
    source_type: str
    trigger_type: TriggerType
    trigger_key: str
    offsets_days: tuple[int, ...]
    active: bool
    threshold_metric_key: str | None = None
    threshold_value: float | None = None
    threshold_comparator: Comparator | None = None
    threshold_firing_policy: FiringPolicy | None = None


@dataclass(frozen=True)
class SourceState:
    source_type: str
    source_guid: UUID
    is_active: bool
    attributes: Mapping[str, Any]


@dataclass(frozen=True)
class SubscriptionState:
    subscription_guid: UUID
    active: bool


class VerdictKind(StrEnum):
    VALID = "valid"
    DEACTIVATE = "deactivate"
    HOLD = "hold"


@dataclass(frozen=True)
class Verdict:
    kind: VerdictKind
    reason: str | None = None
    # The hash the current state yields (recorded as the conflict hash on a hold).
    current_hash: str | None = None


VALID = Verdict(VerdictKind.VALID)


def deactivate(reason: ReasonCode) -> Verdict:
    return Verdict(VerdictKind.DEACTIVATE, reason.value)


def target_date_of(attributes: Mapping[str, Any], name: str) -> date | None:
    """The date a source attribute holds (``YYYY-MM-DD`` or an ISO instant's date)."""
    value = attributes.get(name)
    if not isinstance(value, str):
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value).date()
    except ValueError:
        return None


def metric_of(attributes: Mapping[str, Any], name: str) -> float | None:
    value = attributes.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def condition_met(metric: float, comparator: Comparator, threshold: float) -> bool:
    if comparator is Comparator.GTE:
        return metric >= threshold
    if comparator is Comparator.GT:
        return metric > threshold
    if comparator is Comparator.LTE:
        return metric <= threshold
    return metric < threshold


def _same_text(a: str, b: str) -> bool:
    try:
        return norm_text(a) == norm_text(b)
    except ValueError:
        return False


def _compare(row_hash: str, current: AutomationInput) -> Verdict:
    now_hash = input_hash(current)
    if now_hash != row_hash:
        return Verdict(VerdictKind.HOLD, HOLD_INPUT_HASH_MISMATCH, now_hash)
    return VALID


def revalidate_reminder(
    occurrence: ReminderDateInput | ReminderThresholdInput,
    row_hash: str,
    setting: SettingState | None,
    source: SourceState | None,
) -> Verdict:
    """Does the current setting + source still yield this reminder occurrence?"""
    if setting is None or not setting.active:
        return deactivate(ReasonCode.REMINDER_SETTING_INACTIVE)
    if source is None or not source.is_active:
        return deactivate(ReasonCode.SOURCE_NO_LONGER_VALID)
    if not (
        setting.trigger_type is occurrence.trigger_type
        and _same_text(setting.trigger_key, occurrence.trigger_key)
        and _same_text(setting.source_type, occurrence.source_type)
    ):
        return deactivate(ReasonCode.REMINDER_SETTING_INACTIVE)
    if isinstance(occurrence, ReminderDateInput):
        if occurrence.offset_days not in setting.offsets_days:
            return deactivate(ReasonCode.REMINDER_SETTING_INACTIVE)
        target = target_date_of(source.attributes, setting.trigger_key)
        if target is None or target != occurrence.target_date:
            return deactivate(ReasonCode.SOURCE_NO_LONGER_VALID)
        current: AutomationInput = ReminderDateInput(
            setting.setting_guid,
            source.source_type,
            source.source_guid,
            setting.trigger_key,
            target,
            occurrence.offset_days,
        )
        return _compare(row_hash, current)
    threshold_same = (
        setting.threshold_metric_key is not None
        and setting.threshold_value is not None
        and setting.threshold_comparator is not None
        and setting.threshold_firing_policy is occurrence.firing_policy
        and _same_text(setting.threshold_metric_key, occurrence.metric_key)
        and norm_number(setting.threshold_value) == norm_number(occurrence.threshold_value)
    )
    if not threshold_same:
        return deactivate(ReasonCode.REMINDER_SETTING_INACTIVE)
    assert setting.threshold_metric_key is not None and setting.threshold_value is not None
    assert setting.threshold_comparator is not None
    metric = metric_of(source.attributes, setting.threshold_metric_key)
    if metric is None or not condition_met(
        metric, setting.threshold_comparator, setting.threshold_value
    ):
        return deactivate(ReasonCode.SOURCE_NO_LONGER_VALID)
    current = ReminderThresholdInput(
        setting.setting_guid,
        source.source_type,
        source.source_guid,
        setting.trigger_key,
        setting.threshold_metric_key,
        setting.threshold_value,
        occurrence.firing_policy,
        occurrence.scope_key,
    )
    return _compare(row_hash, current)


def revalidate_report(
    occurrence: ReportScheduledInput | ReportManualInput,
    row_hash: str,
    subscription: SubscriptionState | None,
) -> Verdict:
    """A report run is due only while its subscription exists and is active."""
    if subscription is None or not subscription.active:
        return deactivate(ReasonCode.REPORT_SUBSCRIPTION_INACTIVE)
    if isinstance(occurrence, ReportScheduledInput):
        current: AutomationInput = ReportScheduledInput(
            subscription.subscription_guid, occurrence.period_start
        )
    else:
        current = ReportManualInput(subscription.subscription_guid, occurrence.manual_run_guid)
    return _compare(row_hash, current)
