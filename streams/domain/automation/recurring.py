"""The Recurring trigger (seed 003 TriggerTypeId ``Recurring``): a source date that recurs —
a yearly work anniversary (TriggerKey ``HireDate``), a monthly invoice day — reminded
``offsetDays`` before each occurrence. Pure: states in, candidates and verdicts out.

One key per occurrence, in the seed's date format with the occurrence as its target date:
``reminder:{settingGuid}:{sourceType}:{sourceGuid}:{triggerKey}:{occurrenceDate}:{offsetDays}``
(the row's TriggerTypeId ``Recurring`` tells it from a DateBased key; the InputHash covers
the TriggerType, so the two never share a hash).

- Occurrences are the anchor's anniversaries after the anchor itself: Yearly on the anchor's
  month and day, Monthly on its day of the month; a day the month does not have is its last
  day (29 Feb → 28 Feb, the 31st → 30 Apr). The anchor is not an occurrence (a hire date is no
  anniversary).
- The planner ensures, per offset, the **next** occurrence whose reminder day (occurrence -
  offset, at SendTimeLocal in the BU zone, the one DST rule of ``local_time``) is today or
  later; the occurrences of the last year and the one after the next stay valid (an overdue
  row, or the successor a completed occurrence ensured, is not deactivated as stale).
- A completed occurrence ensures its successor in the execution transaction (``successors``),
  so the chain goes on without a source event and without a scan of the sources.
- Empty OffsetsDays means on the day itself (offset 0); no Recurrence means Yearly.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterable, Iterator
from datetime import date, timedelta

from streams.contracts.automation import (
    Recurrence,
    ReminderSettingChanged,
    SourceEntityChanged,
    TriggerType,
)
from streams.domain.automation.revalidation import (
    HOLD_INPUT_HASH_MISMATCH,
    VALID,
    ReasonCode,
    Verdict,
    VerdictKind,
    deactivate,
    target_date_of,
)
from streams.domain.automation.rules import (
    ReminderDateInput,
    SchedulerCandidate,
    input_hash,
    norm_text,
    parse_scheduler_key,
)
from streams.domain.automation.triggers import NOTHING, Evaluation, TriggerInput, applies
from streams.domain.local_time import local_to_utc, local_today

# How far back occurrences stay valid (an overdue Pending row is not stale).
LOOKBACK = timedelta(days=366)


class ReminderRecurringInput(ReminderDateInput):
    """One occurrence of a recurring date: ``target_date`` is the occurrence, not the anchor."""

    trigger_type = TriggerType.RECURRING


def recurrence_of(setting: ReminderSettingChanged) -> Recurrence:
    return setting.recurrence or Recurrence.YEARLY


def offsets_of(setting: ReminderSettingChanged) -> tuple[int, ...]:
    return tuple(sorted(set(setting.offsets_days))) or (0,)


def _on(year: int, month: int, day: int) -> date:
    return date(year, month, min(day, calendar.monthrange(year, month)[1]))


def occurrences_from(anchor: date, recurrence: Recurrence, start: date) -> Iterator[date]:
    """The occurrences of ``anchor`` on or after ``start`` (and after the anchor), in order."""
    if recurrence is Recurrence.YEARLY:
        year = max(start.year, anchor.year + 1)
        while year <= date.max.year:
            day = _on(year, anchor.month, anchor.day)
            if day >= start:
                yield day
            year += 1
        return
    year, month = (start.year, start.month) if start > anchor else (anchor.year, anchor.month)
    while year <= date.max.year:
        day = _on(year, month, anchor.day)
        if day >= start and day > anchor:
            yield day
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)


def is_occurrence(anchor: date, recurrence: Recurrence, day: date) -> bool:
    return next(occurrences_from(anchor, recurrence, day), None) == day


def occurrence_input(
    setting: ReminderSettingChanged, source: SourceEntityChanged, occurrence: date, offset: int
) -> ReminderRecurringInput:
    return ReminderRecurringInput(
        setting.setting_guid,
        source.source_type,
        source.source_guid,
        setting.trigger_key,
        occurrence,
        offset,
    )


def _candidate(
    setting: ReminderSettingChanged,
    source: SourceEntityChanged,
    zone: str,
    occurrence: date,
    offset: int,
) -> SchedulerCandidate:
    local_day = occurrence - timedelta(days=offset)
    return SchedulerCandidate(
        occurrence_input(setting, source, occurrence, offset),
        local_to_utc(local_day, setting.send_time_local, zone),
        local_day,
        zone,
    )


def _next(anchor: date, recurrence: Recurrence, offset: int, today: date) -> date | None:
    """The first occurrence whose reminder day is ``today`` or later."""
    return next(occurrences_from(anchor, recurrence, today + timedelta(days=offset)), None)


class RecurringProvider:
    name = TriggerType.RECURRING.value

    def evaluate(self, inp: TriggerInput) -> Evaluation:
        setting, source = inp.setting, inp.source
        if not applies(setting, source):
            return NOTHING
        anchor = target_date_of(source.attributes, setting.trigger_key)
        if anchor is None:
            return NOTHING
        recurrence = recurrence_of(setting)
        today = local_today(inp.as_of, inp.zone)
        valid: set[str] = set()
        ensure: list[SchedulerCandidate] = []
        for offset in offsets_of(setting):
            upcoming = _next(anchor, recurrence, offset, today)
            if upcoming is None:
                continue
            candidate = _candidate(setting, source, inp.zone, upcoming, offset)
            ensure.append(candidate)
            valid.add(candidate.key)
            # Valid: the last year's occurrences, the upcoming one and the one after it (the
            # successor a completed upcoming occurrence ensures).
            since = today - LOOKBACK + timedelta(days=offset)
            for day in occurrences_from(anchor, recurrence, since):
                valid.add(occurrence_input(setting, source, day, offset).key())
                if day > upcoming:
                    break
        return Evaluation(frozenset(valid), tuple(ensure))


def successors(
    setting: ReminderSettingChanged,
    source: SourceEntityChanged,
    zone: str,
    done: ReminderRecurringInput,
) -> list[SchedulerCandidate]:
    """The occurrence after ``done`` for the same offset (ensured when ``done`` completes)."""
    anchor = target_date_of(source.attributes, setting.trigger_key)
    if anchor is None or not applies(setting, source):
        return []
    following = next(
        occurrences_from(anchor, recurrence_of(setting), done.target_date + timedelta(days=1)),
        None,
    )
    if following is None:
        return []
    return [_candidate(setting, source, zone, following, done.offset_days)]


def as_recurring(occurrence: ReminderDateInput) -> ReminderRecurringInput:
    """A key in the date format read back for a row whose TriggerTypeId is Recurring."""
    return ReminderRecurringInput(
        occurrence.setting_guid,
        occurrence.source_type,
        occurrence.source_guid,
        occurrence.trigger_key,
        occurrence.target_date,
        occurrence.offset_days,
    )


def _same_text(a: str, b: str) -> bool:
    try:
        return norm_text(a) == norm_text(b)
    except ValueError:
        return False


def revalidate_recurring(
    occurrence: ReminderRecurringInput,
    row_hash: str,
    setting: ReminderSettingChanged | None,
    source: SourceEntityChanged | None,
) -> Verdict:
    """Does the current setting + source still yield this occurrence? As for DateBased: a
    setting that no longer has the row's identity → ReminderSettingInactive; a source that is
    gone, inactive, or whose date no longer recurs on the occurrence → SourceNoLongerValid."""
    if setting is None or not setting.active:
        return deactivate(ReasonCode.REMINDER_SETTING_INACTIVE)
    if source is None or not source.is_active:
        return deactivate(ReasonCode.SOURCE_NO_LONGER_VALID)
    if not (
        setting.trigger_type is TriggerType.RECURRING
        and _same_text(setting.trigger_key, occurrence.trigger_key)
        and _same_text(setting.source_type, occurrence.source_type)
        and occurrence.offset_days in offsets_of(setting)
    ):
        return deactivate(ReasonCode.REMINDER_SETTING_INACTIVE)
    anchor = target_date_of(source.attributes, setting.trigger_key)
    if anchor is None or not is_occurrence(anchor, recurrence_of(setting), occurrence.target_date):
        return deactivate(ReasonCode.SOURCE_NO_LONGER_VALID)
    current = input_hash(
        occurrence_input(setting, source, occurrence.target_date, occurrence.offset_days)
    )
    if current != row_hash:
        return Verdict(VerdictKind.HOLD, HOLD_INPUT_HASH_MISMATCH, current)
    return VALID


class RecurringInvalidation:
    """ReasonCodes for open Recurring rows the current state no longer yields."""

    name = "RecurringOccurrences"

    def reasons(
        self, stale: Iterable[str], setting: ReminderSettingChanged | None, source_active: bool
    ) -> dict[str, str]:
        return {key: self._reason(key, setting, source_active).value for key in stale}

    @staticmethod
    def _reason(
        key: str, setting: ReminderSettingChanged | None, source_active: bool
    ) -> ReasonCode:
        if setting is None or not setting.active:
            return ReasonCode.REMINDER_SETTING_INACTIVE
        if not source_active:
            return ReasonCode.SOURCE_NO_LONGER_VALID
        try:
            occurrence = parse_scheduler_key(key)
        except ValueError:
            return ReasonCode.SOURCE_NO_LONGER_VALID
        same = (
            isinstance(occurrence, ReminderDateInput)
            and setting.trigger_type is TriggerType.RECURRING
            and occurrence.offset_days in offsets_of(setting)
            and _same_text(occurrence.trigger_key, setting.trigger_key)
        )
        return ReasonCode.SOURCE_NO_LONGER_VALID if same else ReasonCode.REMINDER_SETTING_INACTIVE
