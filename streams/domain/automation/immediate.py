"""Immediate notifications (seed 003: IImmediateNotificationProvider, "ensure immediate
notification if needed" after the rows are ensured). Pure: states in, candidates out.

A DateBased setting with ImmediateNotification gets, for each source whose target date is
today or later (BU zone), one extra row due at once beside the scheduled reminders:
``reminder:{settingGuid}:{sourceType}:{sourceGuid}:{triggerKey}:{targetDate}:immediate``.
It is an ordinary scheduler row: Ensure makes it once (an event, a replay and reconciliation
give the same key; a Completed one is never re-sent, also after retention deleted its row:
the key is named as long as the target date is ahead, and its record in
automation.scheduler_history answers Ensure), the runner is woken at once, revalidates
it and writes its DispatchRequested (``Immediate: true``) to the same outbox. A new target date
is a new occurrence, so it gets its own immediate notification.

Providers are found by TriggerType name. ThresholdCondition has none (its rows are due when
the condition is met, which is already immediate); Recurring has none (a recurring date is
not news when it recurs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from streams.contracts.automation import ReminderSettingChanged, SourceEntityChanged, TriggerType
from streams.domain.automation.keys import IMMEDIATE, ReminderImmediateInput
from streams.domain.automation.revalidation import (
    HOLD_INPUT_HASH_MISMATCH,
    VALID,
    ReasonCode,
    Verdict,
    VerdictKind,
    deactivate,
    target_date_of,
)
from streams.domain.automation.rules import SchedulerCandidate, input_hash, norm_text
from streams.domain.automation.triggers import TriggerInput, applies
from streams.domain.local_time import local_today


class ImmediateNotificationProvider(Protocol):
    name: str

    def notifications(self, inp: TriggerInput) -> tuple[SchedulerCandidate, ...]:
        """The immediate notifications the setting + source need now (their keys are valid
        while they are yielded; an open one no longer yielded is deactivated)."""
        ...


def is_immediate_key(key: str) -> bool:
    return key.startswith("reminder:") and key.endswith(f":{IMMEDIATE}")


class DateBasedImmediate:
    name = TriggerType.DATE_BASED.value

    def notifications(self, inp: TriggerInput) -> tuple[SchedulerCandidate, ...]:
        setting, source = inp.setting, inp.source
        if not setting.immediate_notification or not applies(setting, source):
            return ()
        target = target_date_of(source.attributes, setting.trigger_key)
        today = local_today(inp.as_of, inp.zone)
        if target is None or target < today:
            return ()  # no date, or one already past: nothing to tell at once
        occurrence = ReminderImmediateInput(
            setting.setting_guid,
            source.source_type,
            source.source_guid,
            setting.trigger_key,
            target,
        )
        return (SchedulerCandidate(occurrence, inp.as_of, today, inp.zone),)


def default_immediate() -> Mapping[str, ImmediateNotificationProvider]:
    providers: list[ImmediateNotificationProvider] = [DateBasedImmediate()]
    return {p.name: p for p in providers}


def _same_text(a: str, b: str) -> bool:
    try:
        return norm_text(a) == norm_text(b)
    except ValueError:
        return False


def _asks(setting: ReminderSettingChanged, occurrence: ReminderImmediateInput) -> bool:
    return (
        setting.active
        and setting.immediate_notification
        and setting.trigger_type is TriggerType.DATE_BASED
        and _same_text(setting.trigger_key, occurrence.trigger_key)
        and _same_text(setting.source_type, occurrence.source_type)
    )


def immediate_reason(
    occurrence: ReminderImmediateInput | None,
    setting: ReminderSettingChanged | None,
    source_active: bool,
) -> ReasonCode:
    """Why an open immediate row no longer holds: the setting stopped asking for it (or is
    gone) → ReminderSettingInactive; otherwise its source changed → SourceNoLongerValid."""
    if setting is None or occurrence is None or not _asks(setting, occurrence):
        return ReasonCode.REMINDER_SETTING_INACTIVE
    return ReasonCode.SOURCE_NO_LONGER_VALID


def revalidate_immediate(
    occurrence: ReminderImmediateInput,
    row_hash: str,
    setting: ReminderSettingChanged | None,
    source: SourceEntityChanged | None,
) -> Verdict:
    """At execution: the setting still asks for it and the source still has that date."""
    if setting is None or not _asks(setting, occurrence):
        return deactivate(ReasonCode.REMINDER_SETTING_INACTIVE)
    if source is None or not source.is_active:
        return deactivate(ReasonCode.SOURCE_NO_LONGER_VALID)
    if target_date_of(source.attributes, setting.trigger_key) != occurrence.target_date:
        return deactivate(ReasonCode.SOURCE_NO_LONGER_VALID)
    current = input_hash(
        ReminderImmediateInput(
            setting.setting_guid,
            source.source_type,
            source.source_guid,
            setting.trigger_key,
            occurrence.target_date,
        )
    )
    if current != row_hash:
        return Verdict(VerdictKind.HOLD, HOLD_INPUT_HASH_MISMATCH, current)
    return VALID
