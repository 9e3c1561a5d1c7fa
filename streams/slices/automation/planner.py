"""The seed's main flow for a set of changed entities, on the caller's transaction:

lock the BUs → load source state → resolve the BU time zone → load the settings that apply
(BusinessUnitId + SourceType) → DEACTIVATE the open rows that no longer hold → ensure the
rows that should exist.

The scope is a set of sources and a set of settings: every open row of those is looked at,
and every (active setting, active source) pair of the scope's (BU, SourceType) is evaluated
by the trigger provider its TriggerType names. The agents (sources, settings, BUs) and the
bounded reconciliation all come through here, so they build the same keys.

A setting's scope (every active source of its BU and SourceType) is a fan-out: it is saved
(``automation.fanout_progress``) and planned in chunks of at most ``chunk_sources`` sources
in SourceGuid order, each chunk with the open rows of the setting in the same SourceGuid
range, and the position committed with it. A chunk is the one-transaction plan restricted to
its sources (every key names its source), so the chunks together plan the same rows. The
caller's transaction does the first chunks (``chunk_sources`` in all); the fan-out drainer
(fanout.py) does the rest, ``chunk_sources`` sources a transaction.

Lookups read the PostgreSQL projections after taking a transaction-scoped lock per BU: the
writers of one BU are serialized, so whichever of a source, its setting or its BU arrives
last sees the other two and ensures the rows (out-of-order arrival converges).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from db import business_units as units_repo
from db import fanout_progress as progress_repo
from db import reminder_settings as settings_repo
from db import report_subscriptions as subscriptions_repo
from db import scheduler as scheduler_repo
from db import sources as sources_repo
from db import threshold_states as thresholds_repo
from db.connector import Connection
from db.fanout_progress import Progress
from db.scheduler import EnsuredRow
from streams import logs
from streams.contracts.automation import (
    ReminderSettingChanged,
    ReportSubscriptionChanged,
    SourceEntityChanged,
    TriggerType,
)
from streams.domain.automation.immediate import (
    ImmediateNotificationProvider,
    default_immediate,
    immediate_reason,
    is_immediate_key,
)
from streams.domain.automation.keys import ReminderImmediateInput, parse_scheduler_key
from streams.domain.automation.reports import scheduled_runs
from streams.domain.automation.revalidation import ReasonCode
from streams.domain.automation.rules import SchedulerCandidate, norm_text, unique_by_key
from streams.domain.automation.triggers import (
    VALUE_FREE,
    ProviderRegistry,
    ThresholdMemory,
    TriggerInput,
)
from streams.slices.automation.rows import SchedulerRows

SourceRef = tuple[str, UUID]

log = logging.getLogger("streams.slices.automation.planner")

# The SourceGuid range a fan-out covers, both ends included.
FIRST_GUID = UUID(int=0)
LAST_GUID = UUID(int=(1 << 128) - 1)


@dataclass
class Planned:
    """What one planning pass did (after commit: wake the runner for ``candidates``)."""

    candidates: list[SchedulerCandidate] = field(default_factory=list)
    ensured: list[EnsuredRow] = field(default_factory=list)
    deactivated: int = 0
    unfinished: int = 0
    """Fan-outs this pass left for the drainer (after commit: wake it)."""
    chunks: int = 0

    def merge(self, other: Planned) -> Planned:
        self.candidates += other.candidates
        self.ensured += other.ensured
        self.deactivated += other.deactivated
        self.unfinished += other.unfinished
        self.chunks += other.chunks
        return self


def _immediate(key: str) -> ReminderImmediateInput | None:
    try:
        parsed = parse_scheduler_key(key)
    except ValueError:
        return None
    return parsed if isinstance(parsed, ReminderImmediateInput) else None


def ref(source: SourceEntityChanged) -> SourceRef:
    return (norm_text(source.source_type), source.source_guid)


class Planner:
    def __init__(
        self,
        rows: SchedulerRows,
        providers: ProviderRegistry,
        report_window: timedelta = timedelta(days=7),
        immediate: Mapping[str, ImmediateNotificationProvider] | None = None,
        chunk_sources: int = 1000,
    ) -> None:
        if chunk_sources < 1:
            raise ValueError("chunk_sources must be >= 1")
        self.chunk_sources = chunk_sources
        self.rows = rows
        self.providers = providers
        self.report_window = report_window
        # IImmediateNotificationProvider by TriggerType: after the rows, "ensure immediate
        # notification if needed" (an extra row due at once, its own key).
        self.immediate = default_immediate() if immediate is None else immediate

    # --- reminders --------------------------------------------------------------------------

    async def for_sources(
        self,
        conn: Connection,
        refs: Collection[SourceRef],
        as_of: datetime,
        horizon: datetime | None = None,
    ) -> Planned:
        """A source changed: its settings are those of its (BU, SourceType). ``horizon``
        (reconciliation's due window) leaves rows due later to the event path."""
        sources = list((await sources_repo.changes_get(conn, refs)).values())
        units = {s.business_unit_id for s in sources}
        settings = await settings_repo.of_units(conn, units)
        open_rows = await scheduler_repo.open_of_sources(conn, refs)
        return await self._reminders(conn, sources, settings, open_rows, as_of, horizon)

    async def for_settings(
        self,
        conn: Connection,
        guids: Collection[UUID],
        as_of: datetime,
        horizon: datetime | None = None,
    ) -> Planned:
        """A setting changed: its sources are the active ones of its (BU, SourceType). Its
        fan-out starts again from the first source (superseding an unfinished one); this
        transaction plans up to ``chunk_sources`` sources of the settings, the drainer the
        rest (``Planned.unfinished``)."""
        await progress_repo.request(conn, guids, horizon, as_of)
        return await self.advance(conn, guids, as_of, self.chunk_sources)

    async def advance(
        self, conn: Connection, guids: Collection[UUID], as_of: datetime, budget: int
    ) -> Planned:
        """Chunks of the unfinished, unparked fan-outs of ``guids`` (in the order of a list,
        else SettingGuid order) until ``budget`` sources are planned; the caller holds their
        BUs' locks."""
        planned = Planned()
        order = {g: i for i, g in enumerate(guids)} if isinstance(guids, list) else {}
        found = await progress_repo.get(conn, guids)
        found.sort(key=lambda p: order.get(p.setting_guid, 0))
        for progress in found:
            if progress.parked_on is not None:
                continue
            current: Progress | None = progress
            while current is not None and budget > 0:
                done, used, current = await self.setting_chunk(conn, current, as_of, budget)
                planned.merge(done)
                budget -= used
            planned.unfinished += current is not None
        return planned

    async def setting_chunk(
        self, conn: Connection, progress: Progress, as_of: datetime, limit: int
    ) -> tuple[Planned, int, Progress | None]:
        """One chunk of a setting's fan-out: up to ``limit`` of its sources after the saved
        position and its open rows in the same SourceGuid range, planned as
        ``_reminders`` plans the whole scope; the position is saved (or the fan-out ended)
        in the same transaction. Returns what it planned, the sources it counted (at least
        1) and the progress left (None when finished)."""
        guid = progress.setting_guid
        settings = await settings_repo.changes_get(conn, [guid])
        setting = settings.get(guid)
        after = progress.after_guid
        first = FIRST_GUID if after is None else UUID(int=after.int + 1)
        sources: list[SourceEntityChanged] = []
        if setting is not None:
            sources = await sources_repo.of_unit_range(
                conn, setting.business_unit_id, norm_text(setting.source_type), first, limit
            )
        last = sources[-1].source_guid if len(sources) >= limit else LAST_GUID
        open_rows = await scheduler_repo.open_of_setting_range(conn, guid, first, last)
        if after is None:
            open_rows += await scheduler_repo.open_of_setting_unsourced(conn, guid)
        planned = await self._reminders(
            conn, sources, settings.values(), open_rows, as_of, progress.horizon
        )
        planned.chunks = 1
        if last == LAST_GUID:
            await progress_repo.done(conn, guid)
            return planned, max(1, len(sources)), None
        await progress_repo.advance(conn, guid, last, as_of)
        following = Progress(
            guid,
            last,
            progress.horizon,
            progress.setting_version,
            progress.chunks + 1,
            0,
            None,
            None,
        )
        return planned, max(1, len(sources)), following

    async def for_units(
        self,
        conn: Connection,
        units: Collection[UUID],
        as_of: datetime,
        horizon: datetime | None = None,
    ) -> Planned:
        """A BU (its zone) changed: every active setting of it, with its sources; and the
        scheduled runs of its report subscriptions (bounded by the report window)."""
        settings = await settings_repo.of_units(conn, units)
        planned = await self.for_settings(conn, {s.setting_guid for s in settings}, as_of, horizon)
        subscriptions = await subscriptions_repo.of_units(conn, units)
        return planned.merge(await self.for_subscriptions(conn, subscriptions, as_of))

    async def _reminders(
        self,
        conn: Connection,
        sources: Iterable[SourceEntityChanged],
        settings: Iterable[ReminderSettingChanged],
        open_rows: Iterable[scheduler_repo.OpenRow],
        as_of: datetime,
        horizon: datetime | None = None,
    ) -> Planned:
        sources_by_ref = {ref(s): s for s in sources}
        settings_by_guid = {s.setting_guid: s for s in settings}
        open_list = list(open_rows)
        # Settings and sources that open rows name but the scope did not load (an inactive
        # setting, another BU): loaded to say why their rows no longer hold.
        missing = {r.setting_guid for r in open_list if r.setting_guid is not None}
        settings_by_guid.update(
            await settings_repo.changes_get(conn, missing - set(settings_by_guid))
        )
        refs = {
            (r.source_type, r.source_guid)
            for r in open_list
            if r.source_type is not None and r.source_guid is not None
        }
        sources_by_ref.update(await sources_repo.changes_get(conn, refs - set(sources_by_ref)))
        zones = await units_repo.get_by_id(
            conn, {s.business_unit_id for s in sources_by_ref.values()}
        )
        pairs = [
            (setting, source)
            for setting in settings_by_guid.values()
            for source in sources_by_ref.values()
            if setting.business_unit_id == source.business_unit_id
            and norm_text(setting.source_type) == norm_text(source.source_type)
        ]
        thresholds = [
            (t.setting_guid, *ref(s))
            for t, s in pairs
            if t.trigger_type is TriggerType.THRESHOLD_CONDITION
        ]
        memory = await thresholds_repo.get_by_key(conn, thresholds)
        value_free = [
            (t.setting_guid, *ref(s))
            for t, s in pairs
            if t.trigger_type is TriggerType.THRESHOLD_CONDITION
            and t.threshold is not None
            and t.threshold.firing_policy in VALUE_FREE
        ]
        dispatched = await scheduler_repo.dispatched_of_thresholds(conn, value_free)
        valid: set[str] = set()
        ensure: list[SchedulerCandidate] = []
        new_memory: dict[tuple[UUID, str, UUID], ThresholdMemory] = {}
        for setting, source in pairs:
            provider = self.providers.trigger(setting.trigger_type.value)
            zone = zones.get(source.business_unit_id)
            if provider is None or zone is None:
                continue  # no provider for the type, or the BU not known yet
            triple = (setting.setting_guid, *ref(source))
            immediate = self.immediate.get(setting.trigger_type.value)
            try:
                trigger_input = TriggerInput(
                    setting,
                    source,
                    zone,
                    as_of,
                    memory.get(triple),
                    dispatched.get(triple, frozenset()),
                )
                result = provider.evaluate(trigger_input)
                notes = immediate.notifications(trigger_input) if immediate else ()
            except (ValueError, OverflowError) as exc:
                # A pair whose occurrence cannot be built (a date beyond the calendar, a key
                # over 1024 characters) has no row; it must not refuse the whole message,
                # or one odd source would block its setting's and BU's changes too.
                logs.event(
                    log,
                    logging.WARNING,
                    "automation_candidate_unbuildable",
                    setting_guid=setting.setting_guid,
                    source_guid=source.source_guid,
                    error=type(exc).__name__,
                )
                continue
            valid |= result.valid | {c.key for c in notes}
            ensure += result.ensure + notes
            if result.memory is not None and result.memory != memory.get(triple):
                new_memory[triple] = result.memory
        reasons: dict[str, str] = {}
        for r in open_list:
            if r.scheduler_key in valid:
                continue
            row_setting = settings_by_guid.get(r.setting_guid) if r.setting_guid else None
            row_source = sources_by_ref.get((r.source_type or "", r.source_guid or UUID(int=0)))
            # The provider of the row's own setting says why; a vanished setting → DateBased's.
            kind = row_setting.trigger_type if row_setting else TriggerType.DATE_BASED
            invalidation = self.providers.invalidation(kind.value)
            if invalidation is None:
                continue
            active = row_source is not None and row_source.is_active
            if is_immediate_key(r.scheduler_key):
                reasons[r.scheduler_key] = immediate_reason(
                    _immediate(r.scheduler_key), row_setting, active
                ).value
                continue
            reasons.update(invalidation.reasons([r.scheduler_key], row_setting, active))
        if horizon is not None:
            ensure = [c for c in ensure if c.scheduled_on <= horizon]
        await thresholds_repo.put(conn, new_memory, as_of)
        return await self._apply(conn, reasons, ensure, as_of)

    async def _apply(
        self,
        conn: Connection,
        reasons: dict[str, str],
        ensure: list[SchedulerCandidate],
        as_of: datetime,
    ) -> Planned:
        deactivated = await self.rows.deactivate(conn, reasons, as_of) if reasons else []
        candidates = unique_by_key(ensure)
        ensured = await self.rows.ensure(conn, candidates, as_of) if candidates else []
        return Planned(candidates, ensured, sum(1 for d in deactivated if d.changed))

    # --- report subscriptions ---------------------------------------------------------------

    async def for_subscriptions(
        self, conn: Connection, subscriptions: Iterable[ReportSubscriptionChanged], as_of: datetime
    ) -> Planned:
        """Scheduled runs: one row per period start in [as_of, as_of + window); open rows of
        periods the current schedule does not have (from as_of - window on) are deactivated."""
        subs = {s.subscription_guid: s for s in subscriptions}
        zones = await units_repo.get_by_id(conn, {s.business_unit_id for s in subs.values()})
        open_rows = await scheduler_repo.open_of_subscriptions(conn, subs)
        reasons: dict[str, str] = {}
        ensure: list[SchedulerCandidate] = []
        for guid, sub in subs.items():
            zone = zones.get(sub.business_unit_id)
            if zone is None:
                continue
            valid: set[str] = set()
            if sub.active:
                past = scheduled_runs(
                    guid, sub.period, sub.cron, zone, as_of - self.report_window, as_of
                )
                upcoming = scheduled_runs(
                    guid, sub.period, sub.cron, zone, as_of, as_of + self.report_window
                )
                valid = {c.key for c in past + upcoming}
                ensure += upcoming
            for key in open_rows.get(guid, set()) - valid:
                reasons[key] = ReasonCode.REPORT_SUBSCRIPTION_INACTIVE.value
        return await self._apply(conn, reasons, ensure, as_of)
