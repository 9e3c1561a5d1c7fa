"""Automation contracts: sources, reminder settings, business units, report subscriptions (seed 003)."""

from __future__ import annotations

import math
from datetime import date, time
from enum import StrEnum
from typing import Any
from uuid import UUID

from pydantic import Field, field_validator, model_validator

from streams.contracts.base import MAX_VERSION, Contract, Instant, StateMessage, TimeZoneId


class AutomationType(StrEnum):
    REMINDER = "Reminder"
    REPORT_SUBSCRIPTION = "ReportSubscription"


class TriggerType(StrEnum):
    DATE_BASED = "DateBased"
    THRESHOLD_CONDITION = "ThresholdCondition"
    RECURRING = "Recurring"
    SCHEDULED_RUN = "ScheduledRun"
    MANUAL_RUN = "ManualRun"


class Recurrence(StrEnum):
    YEARLY = "Yearly"
    MONTHLY = "Monthly"


class DeliveryChannel(StrEnum):
    EMAIL = "Email"
    SMS = "Sms"
    PUSH = "Push"
    IN_APP = "InApp"


class Comparator(StrEnum):
    GTE = "GreaterThanOrEqual"
    GT = "GreaterThan"
    LTE = "LessThanOrEqual"
    LT = "LessThan"


class FiringPolicy(StrEnum):
    ONCE_PER_SOURCE = "OncePerSource"
    ONCE_PER_THRESHOLD = "OncePerThreshold"
    ONCE_PER_DAY = "OncePerDay"
    FALSE_TO_TRUE = "FalseToTrue"


def _all_finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_all_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_all_finite(v) for v in value)
    return True


class SourceEntityChanged(StateMessage):
    """pin.automation.source-events.v1 — key SourceType:SourceGuid."""

    source_type: str = Field(min_length=1, max_length=64)
    source_guid: UUID
    business_unit_id: UUID
    version: int = Field(ge=0, le=MAX_VERSION)
    occurred_at: Instant
    is_active: bool
    attributes: dict[str, Any] = Field(default_factory=dict)

    @field_validator("attributes")
    @classmethod
    def _finite(cls, v: dict[str, Any]) -> dict[str, Any]:
        if not _all_finite(v):
            raise ValueError("numbers must be finite (NaN and Infinity cannot be re-encoded)")
        return v


class Threshold(Contract):
    metric_key: str = Field(min_length=1)
    value: float
    comparator: Comparator
    firing_policy: FiringPolicy


class ReminderSettingChanged(StateMessage):
    """pin.automation.reminder-settings.v1 — key SettingGuid."""

    setting_guid: UUID
    business_unit_id: UUID
    source_type: str = Field(min_length=1, max_length=64)
    trigger_type: TriggerType
    trigger_key: str = Field(min_length=1, max_length=128)
    offsets_days: list[int] = Field(default_factory=list)
    send_time_local: time = time(9, 0)
    threshold: Threshold | None = None
    active: bool
    version: int = Field(ge=0, le=MAX_VERSION)
    # TriggerType Recurring: the target date (the attribute TriggerKey names) recurs every year
    # (a work anniversary) or every month (an invoice day); absent means Yearly. Optional.
    recurrence: Recurrence | None = None
    # Seed: "ensure immediate notification if needed". A DateBased setting that asks for it
    # gets, besides its scheduled reminders, one dispatch request at once per source and
    # target date (its own SchedulerKey, through the same outbox). Optional.
    immediate_notification: bool = False
    # Resolved at execution (IReminderRecipientProvider / IReminderDeliveryPolicy), never part
    # of a SchedulerKey or InputHash: a change leaves Pending rows as they are. Optional, so
    # producers that do not send them are unaffected.
    template_id: UUID | None = None
    delivery_channels: list[DeliveryChannel] = Field(default_factory=list, max_length=8)
    # Names of source attributes that hold the recipients' user ids (a GUID or a list of them).
    recipient_attributes: list[str] = Field(default_factory=list, max_length=16)

    @field_validator("recipient_attributes")
    @classmethod
    def _attribute_names(cls, v: list[str]) -> list[str]:
        if any(not 0 < len(name) <= 128 for name in v):
            raise ValueError("recipient attribute names must be 1..128 characters")
        return v

    @model_validator(mode="after")
    def _trigger_fields(self) -> ReminderSettingChanged:
        if self.trigger_type is TriggerType.THRESHOLD_CONDITION and self.threshold is None:
            raise ValueError("Threshold is required when TriggerType is ThresholdCondition")
        if self.trigger_type is TriggerType.DATE_BASED and not self.offsets_days:
            raise ValueError("OffsetsDays must not be empty when TriggerType is DateBased")
        return self


class BusinessUnitChanged(StateMessage):
    """pin.automation.business-units.v1 — key BusinessUnitId."""

    business_unit_id: UUID
    time_zone_id: TimeZoneId
    version: int = Field(ge=0, le=MAX_VERSION)


class ReportPeriod(StrEnum):
    DAILY = "Daily"
    WEEKLY = "Weekly"
    MONTHLY = "Monthly"


class ReportSubscriptionChanged(StateMessage):
    """pin.automation.report-subscriptions.v1 — key SubscriptionGuid; a ManualRunGuid asks for one run now."""

    subscription_guid: UUID
    business_unit_id: UUID
    cron: str | None = None
    period: ReportPeriod | None = None
    active: bool
    version: int = Field(ge=0, le=MAX_VERSION)
    manual_run_guid: UUID | None = None

    @model_validator(mode="after")
    def _schedule(self) -> ReportSubscriptionChanged:
        if self.manual_run_guid is None and (self.cron is None) == (self.period is None):
            raise ValueError("exactly one of Cron or Period is required")
        return self


class DispatchRequested(Contract):
    """pin.automation.dispatch-requested.v1 — a due scheduler row handed to notifications (stage ③).

    Key SchedulerKey: the idempotency key downstream. One message per Completed row."""

    scheduler_key: str = Field(min_length=1, max_length=1024)
    automation_type: AutomationType
    trigger_type: TriggerType
    setting_guid: UUID | None = None
    source_type: str | None = None
    source_guid: UUID | None = None
    subscription_guid: UUID | None = None
    scheduled_on: Instant
    scheduled_local_date: date | None = None
    time_zone_id: str | None = None
    input_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    # When the scheduler handed the row over (the Completed transition).
    requested_at: Instant
    # Attempts that failed or were abandoned before this one (RetryCount at completion).
    retry_count: int = Field(0, ge=0)
    # What the recipient provider and delivery policy resolved at execution (from the
    # setting and source as they are when the row is due, not when it was ensured).
    # Identifiers only. Absent for automation types that resolve none (report runs).
    recipient_user_ids: list[UUID] = Field(default_factory=list)
    template_id: UUID | None = None
    delivery_channels: list[DeliveryChannel] = Field(default_factory=list)
    # True for the immediate notification a setting asked for (key ``...:{targetDate}:immediate``).
    immediate: bool = False
