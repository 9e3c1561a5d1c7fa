"""SchedulerKey formats and InputHash (seed 003). Pure: no I/O, no clock, no randomness.

SchedulerKey formats (the seed's, exactly; ``{x}`` is a normalized, encoded component):

- ``reminder:{settingGuid}:{sourceType}:{sourceGuid}:{triggerKey}:{targetDate}:{offsetDays}``
- ``reminder:{settingGuid}:{sourceType}:{sourceGuid}:{triggerKey}:threshold:{thresholdKey}``
  with ``thresholdKey = {metricKey}:{thresholdValue}:{firingPolicy}:{scopeKey}``
- ``report-subscription:{guid}:scheduled:{periodStart}``
- ``report-subscription:{guid}:manual:{manualRunGuid}``
- ``reminder:{settingGuid}:{sourceType}:{sourceGuid}:{triggerKey}:{targetDate}:immediate``
  (not in the seed's list: the immediate notification a setting can ask for, its own key)

Normalization (shared by keys and InputHash, so an event, a retry and a reconciliation
give the same key): text is Unicode NFC with surrounding whitespace removed, then
percent-encoded except ``A-Z a-z 0-9 - _ . ~`` (so a ``:`` inside a component cannot shift
the format, and the key parses back); GUIDs are lower-case hyphenated; dates are
``YYYY-MM-DD``; instants are UTC in ISO-8601 basic form ``YYYYMMDDTHHMMSSZ`` (microseconds
only when present); numbers are their shortest round-trip decimal, integral values without
``.0`` (``80.0`` and ``80`` are one threshold). Nothing random (the ManualRunGuid is made
before, by the requester), no display text, recipients or template ever enters a key.

InputHash = sha256 (hex) of the canonical JSON (sorted keys, no spaces, UTF-8) of
``{"v": 1, "AutomationType", "TriggerType"}`` plus the normalized input fields: the
occurrence identity and the setting fields that shape the key (trigger key, offset,
metric, threshold value, firing policy, scope). Send time, BU time zone, template and
delivery are not in it: a send-time change updates ScheduledOn in place under the same key.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from dataclasses import dataclass
from datetime import UTC, date, datetime
from urllib.parse import quote, unquote
from uuid import UUID

from streams.contracts.automation import AutomationType, FiringPolicy, TriggerType

HASH_VERSION = 1
MAX_KEY_LENGTH = 1024
_SAFE = "-_.~"


# --- normalization ---------------------------------------------------------------------------


def norm_text(value: str) -> str:
    """NFC, surrounding whitespace removed; an empty result is refused."""
    out = unicodedata.normalize("NFC", value).strip()
    if not out:
        raise ValueError("a key component must not be empty")
    return out


def component(value: str) -> str:
    """A normalized text component as it appears in a key (percent-encoded)."""
    return quote(norm_text(value), safe=_SAFE)


def norm_number(value: float) -> str:
    if isinstance(value, bool) or not math.isfinite(value):
        raise ValueError("a threshold value must be a finite number")
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def norm_instant(value: datetime) -> str:
    if value.tzinfo is None:
        raise ValueError("instants must be timezone-aware")
    utc = value.astimezone(UTC)
    text = utc.strftime("%Y%m%dT%H%M%S")
    return text + (f".{utc.microsecond:06d}" if utc.microsecond else "") + "Z"


def parse_instant(text: str) -> datetime:
    fmt = "%Y%m%dT%H%M%S.%fZ" if "." in text else "%Y%m%dT%H%M%SZ"
    return datetime.strptime(text, fmt).replace(tzinfo=UTC)


def _guid(value: UUID) -> str:
    return str(UUID(str(value)))


# --- inputs: each gives its SchedulerKey and the fields its InputHash covers ----------------


@dataclass(frozen=True)
class ReminderDateInput:
    """A DateBased reminder occurrence: ``targetDate - offsetDays`` of one source and setting."""

    setting_guid: UUID
    source_type: str
    source_guid: UUID
    trigger_key: str
    target_date: date
    offset_days: int

    automation_type = AutomationType.REMINDER
    trigger_type = TriggerType.DATE_BASED

    def key(self) -> str:
        return ":".join(
            [
                "reminder",
                _guid(self.setting_guid),
                component(self.source_type),
                _guid(self.source_guid),
                component(self.trigger_key),
                self.target_date.isoformat(),
                str(int(self.offset_days)),
            ]
        )

    def fields(self) -> dict[str, object]:
        return {
            "SettingGuid": _guid(self.setting_guid),
            "SourceType": norm_text(self.source_type),
            "SourceGuid": _guid(self.source_guid),
            "TriggerKey": norm_text(self.trigger_key),
            "TargetDate": self.target_date.isoformat(),
            "OffsetDays": int(self.offset_days),
        }


@dataclass(frozen=True)
class ReminderThresholdInput:
    """A ThresholdCondition reminder: the firing policy and scope are part of the key."""

    setting_guid: UUID
    source_type: str
    source_guid: UUID
    trigger_key: str
    metric_key: str
    threshold_value: float
    firing_policy: FiringPolicy
    scope_key: str

    automation_type = AutomationType.REMINDER
    trigger_type = TriggerType.THRESHOLD_CONDITION

    def threshold_key(self) -> str:
        return ":".join(
            [
                component(self.metric_key),
                norm_number(self.threshold_value),
                FiringPolicy(self.firing_policy).value,
                component(self.scope_key),
            ]
        )

    def key(self) -> str:
        return ":".join(
            [
                "reminder",
                _guid(self.setting_guid),
                component(self.source_type),
                _guid(self.source_guid),
                component(self.trigger_key),
                "threshold",
                self.threshold_key(),
            ]
        )

    def fields(self) -> dict[str, object]:
        return {
            "SettingGuid": _guid(self.setting_guid),
            "SourceType": norm_text(self.source_type),
            "SourceGuid": _guid(self.source_guid),
            "TriggerKey": norm_text(self.trigger_key),
            "MetricKey": norm_text(self.metric_key),
            "ThresholdValue": norm_number(self.threshold_value),
            "FiringPolicy": FiringPolicy(self.firing_policy).value,
            "ScopeKey": norm_text(self.scope_key),
        }


@dataclass(frozen=True)
class ReportScheduledInput:
    """One scheduled run of a report subscription, identified by its period start."""

    subscription_guid: UUID
    period_start: datetime

    automation_type = AutomationType.REPORT_SUBSCRIPTION
    trigger_type = TriggerType.SCHEDULED_RUN

    def key(self) -> str:
        return ":".join(
            [
                "report-subscription",
                _guid(self.subscription_guid),
                "scheduled",
                norm_instant(self.period_start),
            ]
        )

    def fields(self) -> dict[str, object]:
        return {
            "SubscriptionGuid": _guid(self.subscription_guid),
            "PeriodStart": norm_instant(self.period_start),
        }


@dataclass(frozen=True)
class ReportManualInput:
    """A manual run; the ManualRunGuid was generated by the requester, never here."""

    subscription_guid: UUID
    manual_run_guid: UUID

    automation_type = AutomationType.REPORT_SUBSCRIPTION
    trigger_type = TriggerType.MANUAL_RUN

    def key(self) -> str:
        return ":".join(
            [
                "report-subscription",
                _guid(self.subscription_guid),
                "manual",
                _guid(self.manual_run_guid),
            ]
        )

    def fields(self) -> dict[str, object]:
        return {
            "SubscriptionGuid": _guid(self.subscription_guid),
            "ManualRunGuid": _guid(self.manual_run_guid),
        }


@dataclass(frozen=True)
class ReminderImmediateInput:
    """The immediate notification of a DateBased occurrence (seed 003: "ensure immediate
    notification if needed"): one per setting, source and target date, beside its scheduled
    reminders. Key: ``reminder:{settingGuid}:{sourceType}:{sourceGuid}:{triggerKey}:{targetDate}:immediate``."""

    setting_guid: UUID
    source_type: str
    source_guid: UUID
    trigger_key: str
    target_date: date

    automation_type = AutomationType.REMINDER
    trigger_type = TriggerType.DATE_BASED

    def key(self) -> str:
        return ":".join(
            [
                "reminder",
                _guid(self.setting_guid),
                component(self.source_type),
                _guid(self.source_guid),
                component(self.trigger_key),
                self.target_date.isoformat(),
                IMMEDIATE,
            ]
        )

    def fields(self) -> dict[str, object]:
        return {
            "SettingGuid": _guid(self.setting_guid),
            "SourceType": norm_text(self.source_type),
            "SourceGuid": _guid(self.source_guid),
            "TriggerKey": norm_text(self.trigger_key),
            "TargetDate": self.target_date.isoformat(),
            "Immediate": True,
        }


IMMEDIATE = "immediate"

AutomationInput = (
    ReminderDateInput
    | ReminderThresholdInput
    | ReportScheduledInput
    | ReportManualInput
    | ReminderImmediateInput
)


def scheduler_key(inp: AutomationInput) -> str:
    key = inp.key()
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"SchedulerKey longer than {MAX_KEY_LENGTH} characters")
    return key


def input_hash(inp: AutomationInput) -> str:
    doc: dict[str, object] = {
        "v": HASH_VERSION,
        "AutomationType": inp.automation_type.value,
        "TriggerType": inp.trigger_type.value,
        **inp.fields(),
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def parse_scheduler_key(key: str) -> AutomationInput:
    """The input a key was built from (exact inverse of ``scheduler_key``); ValueError if
    ``key`` is not one of the five formats. A threshold value comes back as a float."""
    parts = key.split(":")
    try:
        if parts[0] == "reminder" and len(parts) == 7 and parts[6] == IMMEDIATE:
            return ReminderImmediateInput(
                UUID(parts[1]),
                unquote(parts[2]),
                UUID(parts[3]),
                unquote(parts[4]),
                date.fromisoformat(parts[5]),
            )
        if parts[0] == "reminder" and len(parts) == 7:
            return ReminderDateInput(
                UUID(parts[1]),
                unquote(parts[2]),
                UUID(parts[3]),
                unquote(parts[4]),
                date.fromisoformat(parts[5]),
                int(parts[6]),
            )
        if parts[0] == "reminder" and len(parts) == 10 and parts[5] == "threshold":
            return ReminderThresholdInput(
                UUID(parts[1]),
                unquote(parts[2]),
                UUID(parts[3]),
                unquote(parts[4]),
                unquote(parts[6]),
                float(parts[7]),
                FiringPolicy(parts[8]),
                unquote(parts[9]),
            )
        if parts[0] == "report-subscription" and len(parts) == 4 and parts[2] == "scheduled":
            return ReportScheduledInput(UUID(parts[1]), parse_instant(parts[3]))
        if parts[0] == "report-subscription" and len(parts) == 4 and parts[2] == "manual":
            return ReportManualInput(UUID(parts[1]), UUID(parts[3]))
    except ValueError:
        pass
    raise ValueError("not a SchedulerKey of a known format")
