"""Trigger providers (seed 003, planning): which scheduler rows a source + setting + BU zone
should have. Pure: states in, candidates out; no I/O, no clock (``as_of`` is passed in).

Providers are found by name in a registry (``ProviderRegistry``, built by
``default_providers()``), never through a switch: a TriggerType names its trigger provider
and its invalidation provider.

DateBased: ``scheduledLocalDate = targetDate - offsetDays`` at the setting's SendTimeLocal
in the BU's zone, converted to UTC. The target date is the source attribute the setting's
TriggerKey names. DST rule (the product rule every local schedule shares,
``streams/domain/local_time.py``, docs/rules.md): a send time inside a spring-forward gap is
sent at the instant the gap ends (02:30 on a day the clocks jump 02:00→03:00 is sent at
03:00 local); a send time inside a fall-back overlap is sent at its first occurrence.

Only occurrences whose ScheduledLocalDate is today or later (BU zone, at ``as_of``) are
ensured; every occurrence the state yields is "valid", so a past occurrence is never
deactivated as stale — only keys the state no longer yields are.

ThresholdCondition: the metric (the numeric source attribute MetricKey names) compared with
the threshold; met → the row of the current scope, not met → none (the open row is
deactivated). ``thresholdKey = {metricKey}:{thresholdValue}:{firingPolicy}:{scopeKey}``:

| policy | scopeKey | fires | a changed threshold value |
|---|---|---|---|
| OncePerSource | ``source`` | once per source and setting, ever | does not fire again once a row of the source has been dispatched |
| OncePerThreshold | ``threshold`` | once per source and threshold value | fires again (once) for a new value; a value that has fired never again |
| OncePerDay | the local date (BU zone) of the source state | at most once per local day and value while met | fires again for the new value |
| FalseToTrue | ``rise-v{Version}`` of the source state that turned it true | once per false→true edge | does not fire again within the same true episode |

The value is in every key (the seed's format), so a changed value always deactivates the
old key's open row and yields a new key. For the **value-free** policies (OncePerSource,
FalseToTrue) the provider is also given the keys of the pair's already dispatched
(Processing/Completed) rows: a new key whose occurrence differs from a dispatched one only
in the threshold value is not ensured (``already_fired``).

ScheduledOn of a threshold row is when its episode began (``met_since``): due at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from streams.contracts.automation import (
    FiringPolicy,
    ReminderSettingChanged,
    SourceEntityChanged,
    TriggerType,
)
from streams.domain.automation.revalidation import (
    ReasonCode,
    condition_met,
    metric_of,
    target_date_of,
)
from streams.domain.automation.rules import (
    ReminderDateInput,
    ReminderThresholdInput,
    SchedulerCandidate,
    norm_number,
    norm_text,
    parse_scheduler_key,
)
from streams.domain.local_time import local_to_utc, local_today


@dataclass(frozen=True)
class ThresholdMemory:
    """The last evaluation of a (setting, source) threshold condition."""

    met: bool
    met_since: datetime | None = None
    episode: str | None = None


def threshold_step(
    previous: ThresholdMemory | None, met: bool, source: SourceEntityChanged
) -> ThresholdMemory:
    """The memory after evaluating ``source``: a false→true edge starts a new episode."""
    if not met:
        return ThresholdMemory(False)
    if previous is not None and previous.met and previous.met_since is not None:
        return previous
    return ThresholdMemory(True, source.occurred_at, f"rise-v{source.version}")


@dataclass(frozen=True)
class Evaluation:
    """What a trigger provider says for one (setting, source): ``valid`` keys the state
    yields (rows of other keys are stale), ``ensure`` the candidates to ensure now, and
    the new threshold memory (if the provider keeps one)."""

    valid: frozenset[str]
    ensure: tuple[SchedulerCandidate, ...]
    memory: ThresholdMemory | None = None


NOTHING = Evaluation(frozenset(), ())


@dataclass(frozen=True)
class TriggerInput:
    setting: ReminderSettingChanged
    source: SourceEntityChanged
    zone: str
    as_of: datetime
    memory: ThresholdMemory | None = None
    # Keys of the pair's dispatched (Processing/Completed) ThresholdCondition rows.
    dispatched: frozenset[str] = frozenset()


# Firing policies whose occurrence does not depend on the threshold value.
VALUE_FREE = frozenset({FiringPolicy.ONCE_PER_SOURCE, FiringPolicy.FALSE_TO_TRUE})


def _value_free_identity(occurrence: ReminderThresholdInput) -> tuple[object, ...]:
    return (
        occurrence.setting_guid,
        norm_text(occurrence.source_type),
        occurrence.source_guid,
        norm_text(occurrence.trigger_key),
        norm_text(occurrence.metric_key),
        FiringPolicy(occurrence.firing_policy),
        norm_text(occurrence.scope_key),
    )


def already_fired(occurrence: ReminderThresholdInput, dispatched: Iterable[str]) -> bool:
    """A value-free policy's occurrence that was dispatched under another threshold value."""
    if FiringPolicy(occurrence.firing_policy) not in VALUE_FREE:
        return False
    identity = _value_free_identity(occurrence)
    for key in dispatched:
        try:
            other = parse_scheduler_key(key)
        except ValueError:
            continue
        if isinstance(other, ReminderThresholdInput) and _value_free_identity(other) == identity:
            return True
    return False


class TriggerProvider(Protocol):
    name: str

    def evaluate(self, inp: TriggerInput) -> Evaluation:
        """The rows the setting + source should have (never resolves recipients)."""
        ...


class InvalidationProvider(Protocol):
    name: str

    def reasons(
        self, stale: Iterable[str], setting: ReminderSettingChanged | None, source_active: bool
    ) -> dict[str, str]:
        """ReasonCodes for the open rows of one (setting, source) whose keys the current
        state no longer yields."""
        ...


def applies(setting: ReminderSettingChanged, source: SourceEntityChanged) -> bool:
    return (
        setting.active
        and source.is_active
        and setting.business_unit_id == source.business_unit_id
        and norm_text(setting.source_type) == norm_text(source.source_type)
    )


class DateBasedProvider:
    name = TriggerType.DATE_BASED.value

    def evaluate(self, inp: TriggerInput) -> Evaluation:
        setting, source = inp.setting, inp.source
        if not applies(setting, source):
            return NOTHING
        target = target_date_of(source.attributes, setting.trigger_key)
        if target is None:
            return NOTHING
        today = local_today(inp.as_of, inp.zone)
        valid: set[str] = set()
        ensure: list[SchedulerCandidate] = []
        for offset in sorted(set(setting.offsets_days)):
            local_day = target - timedelta(days=offset)
            occurrence = ReminderDateInput(
                setting.setting_guid,
                source.source_type,
                source.source_guid,
                setting.trigger_key,
                target,
                offset,
            )
            candidate = SchedulerCandidate(
                occurrence,
                local_to_utc(local_day, setting.send_time_local, inp.zone),
                local_day,
                inp.zone,
            )
            valid.add(candidate.key)
            if local_day >= today:
                ensure.append(candidate)
        return Evaluation(frozenset(valid), tuple(ensure))


def scope_key(
    policy: FiringPolicy, memory: ThresholdMemory, source: SourceEntityChanged, zone: str
) -> str:
    if policy is FiringPolicy.ONCE_PER_SOURCE:
        return "source"
    if policy is FiringPolicy.ONCE_PER_THRESHOLD:
        return "threshold"
    if policy is FiringPolicy.ONCE_PER_DAY:
        return local_today(source.occurred_at, zone).isoformat()
    assert memory.episode is not None
    return memory.episode


class ThresholdProvider:
    name = TriggerType.THRESHOLD_CONDITION.value

    def evaluate(self, inp: TriggerInput) -> Evaluation:
        setting, source = inp.setting, inp.source
        threshold = setting.threshold
        if threshold is None or not applies(setting, source):
            return Evaluation(frozenset(), (), ThresholdMemory(False))
        metric = metric_of(source.attributes, threshold.metric_key)
        met = metric is not None and condition_met(metric, threshold.comparator, threshold.value)
        memory = threshold_step(inp.memory, met, source)
        if not met:
            return Evaluation(frozenset(), (), memory)
        assert memory.met_since is not None
        policy = threshold.firing_policy
        occurrence = ReminderThresholdInput(
            setting.setting_guid,
            source.source_type,
            source.source_guid,
            setting.trigger_key,
            threshold.metric_key,
            threshold.value,
            policy,
            scope_key(policy, memory, source, inp.zone),
        )
        when = source.occurred_at if policy is FiringPolicy.ONCE_PER_DAY else memory.met_since
        candidate = SchedulerCandidate(occurrence, when, local_today(when, inp.zone), inp.zone)
        if candidate.key not in inp.dispatched and already_fired(occurrence, inp.dispatched):
            return Evaluation(frozenset({candidate.key}), (), memory)
        return Evaluation(frozenset({candidate.key}), (candidate,), memory)


class StaleOccurrences:
    """Invalidation for reminders: an open row the current state does not yield is
    deactivated. ReminderSettingInactive when its setting is gone or inactive, or the
    setting no longer has the row's identity (its offset, trigger key, threshold); otherwise
    SourceNoLongerValid (the source is inactive, its date moved, its metric not met)."""

    name = "StaleOccurrences"

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
        if isinstance(occurrence, ReminderDateInput):
            same = (
                setting.trigger_type is TriggerType.DATE_BASED
                and occurrence.offset_days in setting.offsets_days
                and norm_text(occurrence.trigger_key) == norm_text(setting.trigger_key)
            )
        elif isinstance(occurrence, ReminderThresholdInput):
            t = setting.threshold
            same = (
                t is not None
                and setting.trigger_type is TriggerType.THRESHOLD_CONDITION
                and norm_text(t.metric_key) == norm_text(occurrence.metric_key)
                and norm_number(t.value) == norm_number(occurrence.threshold_value)
                and t.firing_policy is occurrence.firing_policy
            )
        else:
            same = False
        return ReasonCode.SOURCE_NO_LONGER_VALID if same else ReasonCode.REMINDER_SETTING_INACTIVE


class ProviderRegistry:
    """Trigger and invalidation providers by name; a TriggerType names both."""

    def __init__(self) -> None:
        self.triggers: dict[str, TriggerProvider] = {}
        self.invalidations: dict[str, InvalidationProvider] = {}
        self.invalidation_of: dict[str, str] = {}

    def register(self, trigger: TriggerProvider, invalidation: InvalidationProvider) -> None:
        if trigger.name in self.triggers:
            raise ValueError(f"trigger provider {trigger.name!r} registered twice")
        self.triggers[trigger.name] = trigger
        self.invalidations.setdefault(invalidation.name, invalidation)
        self.invalidation_of[trigger.name] = invalidation.name

    def trigger(self, trigger_type: str) -> TriggerProvider | None:
        return self.triggers.get(trigger_type)

    def invalidation(self, trigger_type: str) -> InvalidationProvider | None:
        name = self.invalidation_of.get(trigger_type)
        return self.invalidations.get(name) if name is not None else None


def default_providers() -> ProviderRegistry:
    registry = ProviderRegistry()
    stale = StaleOccurrences()
    registry.register(DateBasedProvider(), stale)
    registry.register(ThresholdProvider(), stale)
    # Imported here: the Recurring provider is built on this module's helpers.
    from streams.domain.automation.recurring import RecurringInvalidation, RecurringProvider

    registry.register(RecurringProvider(), RecurringInvalidation())
    return registry
