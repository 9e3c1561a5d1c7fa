"""Execution handlers, registered by AutomationType (no switch), and the outcomes they give:
a verdict per row, or a ``Failure`` with its FailureReasonCode. The port they load the
current source / setting / subscription state through is in execution_inputs.py.

A handler revalidates: given a batch of claimed rows of its type, it loads what those rows
depend on (one statement per kind per batch) and returns a verdict per row. A valid reminder
also carries what the recipient provider and delivery policy resolve from the setting and
source as they are now (``Resolved``). Building the dispatch request (batch_plan.py) and
writing it (runner.py) is the same for every type.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from db import scheduler as scheduler_repo
from db.connector import Connection
from db.scheduler import ClaimedRow
from streams.clock import Clock, SystemClock
from streams.contracts.automation import AutomationType, TriggerType
from streams.domain.automation.delivery import (
    Delivery,
    DeliveryPolicy,
    RecipientProvider,
    SettingDeliveryPolicy,
    SourceAttributeRecipients,
    resolve_delivery,
)
from streams.domain.automation.immediate import is_immediate_key, revalidate_immediate
from streams.domain.automation.keys import ReminderImmediateInput
from streams.domain.automation.recurring import (
    ReminderRecurringInput,
    as_recurring,
    revalidate_recurring,
    successors,
)
from streams.domain.automation.revalidation import (
    Verdict,
    VerdictKind,
    revalidate_reminder,
    revalidate_report,
)
from streams.domain.automation.rules import (
    ReminderDateInput,
    ReminderThresholdInput,
    ReportManualInput,
    ReportScheduledInput,
    SchedulerCandidate,
    parse_scheduler_key,
)
from streams.slices.automation.execution_inputs import AutomationInputs, PgAutomationInputs

# FailureReasonCodes the scheduler itself sets (a handler may give its own through Failure).
LEASE_EXPIRED = "LeaseExpired"
# A claim handed back without a verdict once the row's interruption allowance was spent.
INTERRUPTED = "Interrupted"
NO_HANDLER = "NoHandler"
HANDLER_ERROR = "HandlerError"
INVALID_DISPATCH = "InvalidDispatch"
UNKNOWN_KEY_FORMAT = "UnknownKeyFormat"


@dataclass(frozen=True)
class Failure:
    """A failed attempt of one row: it follows the backoff ladder with ``code``. ``detail``
    is stored as the row's last error and must hold no values (identifiers at most)."""

    code: str
    detail: str | None = None


@dataclass(frozen=True)
class Resolved(Verdict):
    """A valid verdict with what execution resolved for the dispatch request."""

    delivery: Delivery | None = None


Outcome = Verdict | Failure


def delivery_of(outcome: Outcome) -> Delivery | None:
    return outcome.delivery if isinstance(outcome, Resolved) else None


class AutomationHandler(Protocol):
    automation_type: AutomationType
    # Seed: only a handler approved as long-running retries daily after the ladder; every
    # other one is put on support hold. The approval is per AutomationType, by configuration
    # (AUTOMATION_DAILY_RETRY_TYPES), never the handler's own say.
    daily_retry: bool

    async def revalidate(
        self, conn: Connection, rows: Sequence[ClaimedRow]
    ) -> Mapping[int, Outcome]:
        """A verdict (or a Failure) per ``scheduler_id``; a row left out counts as failed."""
        ...


class HandlerRegistry:
    """AutomationType → its handler. Registering a type twice is a startup error."""

    def __init__(self, handlers: Iterable[AutomationHandler] = ()) -> None:
        self._handlers: dict[str, AutomationHandler] = {}
        for handler in handlers:
            self.register(handler)

    def register(self, handler: AutomationHandler) -> AutomationHandler:
        kind = AutomationType(handler.automation_type).value
        if kind in self._handlers:
            raise ValueError(f"automation handler for {kind} is already registered")
        self._handlers[kind] = handler
        return handler

    def get(self, automation_type: str) -> AutomationHandler | None:
        return self._handlers.get(automation_type)

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(self._handlers)


def _occurrences(rows: Sequence[ClaimedRow]) -> tuple[dict[int, Any], dict[int, Outcome]]:
    parsed: dict[int, Any] = {}
    bad: dict[int, Outcome] = {}
    for row in rows:
        try:
            parsed[row.scheduler_id] = parse_scheduler_key(row.scheduler_key)
        except ValueError:
            bad[row.scheduler_id] = Failure(UNKNOWN_KEY_FORMAT)
    return parsed, bad


class ReminderHandler:
    """Reminders: the setting and the source must still yield the row's occurrence; a valid
    one is addressed by the recipient provider and delivery policy (seed 003:
    IReminderRecipientProvider / IReminderDeliveryPolicy) from their current state."""

    automation_type = AutomationType.REMINDER

    def __init__(
        self,
        inputs: AutomationInputs,
        *,
        daily_retry: bool = False,
        recipients: RecipientProvider | None = None,
        delivery: DeliveryPolicy | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.inputs = inputs
        self.daily_retry = daily_retry
        self.recipients: RecipientProvider = recipients or SourceAttributeRecipients()
        self.delivery: DeliveryPolicy = delivery or SettingDeliveryPolicy()
        self.clock: Clock = clock or SystemClock()

    async def revalidate(
        self, conn: Connection, rows: Sequence[ClaimedRow]
    ) -> Mapping[int, Outcome]:
        full = [r for r in rows if _on_full_state(r)]
        out = await self._dated(conn, [r for r in rows if not _on_full_state(r)])
        if full:
            out.update(await self._full_state(conn, full))
        return out

    async def _dated(self, conn: Connection, rows: Sequence[ClaimedRow]) -> dict[int, Outcome]:
        if not rows:
            return {}
        parsed, out = _occurrences(rows)
        wanted = {
            i: o
            for i, o in parsed.items()
            if isinstance(o, ReminderDateInput | ReminderThresholdInput)
        }
        out.update({i: Failure(UNKNOWN_KEY_FORMAT) for i in parsed if i not in wanted})
        settings = await self.inputs.reminder_settings(
            conn, {o.setting_guid for o in wanted.values()}
        )
        refs = {(r.source_type, r.source_guid) for r in rows if r.scheduler_id in wanted}
        sources = await self.inputs.sources(
            conn, {(t, g) for t, g in refs if t is not None and g is not None}
        )
        for row in rows:
            occurrence = wanted.get(row.scheduler_id)
            if occurrence is None:
                continue
            source = None
            if row.source_type is not None and row.source_guid is not None:
                source = sources.get((row.source_type, row.source_guid))
            out[row.scheduler_id] = revalidate_reminder(
                occurrence, row.input_hash, settings.get(occurrence.setting_guid), source
            )
        await self._address(
            conn,
            {
                r.scheduler_id: (wanted[r.scheduler_id].setting_guid, _ref(r))
                for r in rows
                if r.scheduler_id in wanted
            },
            {ref: src.attributes for ref, src in sources.items()},
            out,
        )
        return out

    async def _full_state(self, conn: Connection, rows: Sequence[ClaimedRow]) -> dict[int, Outcome]:
        """Recurring and immediate rows, revalidated on the full setting and source states.
        Recurring: the occurrence must still be one of the source date's; a valid one ensures
        its successor (the next occurrence, same offset) in this transaction, so the chain
        goes on without a source event or a scan. Immediate: the setting must still ask for
        it and the source still have its date."""
        parsed, out = _occurrences(rows)
        wanted: dict[int, ReminderRecurringInput | ReminderImmediateInput] = {}
        recurring = {r.scheduler_id for r in rows if r.trigger_type == TriggerType.RECURRING.value}
        for i, o in parsed.items():
            if i in recurring and type(o) is ReminderDateInput:
                wanted[i] = as_recurring(o)
            elif i not in recurring and isinstance(o, ReminderImmediateInput):
                wanted[i] = o
            else:
                out[i] = Failure(UNKNOWN_KEY_FORMAT)
        settings = await self.inputs.setting_states(conn, {o.setting_guid for o in wanted.values()})
        sources = await self.inputs.source_states(
            conn, {ref for r in rows if r.scheduler_id in wanted and (ref := _ref(r))[1].int}
        )
        zones = await self.inputs.unit_zones(conn, {s.business_unit_id for s in settings.values()})
        following: list[SchedulerCandidate] = []
        for row in rows:
            occurrence = wanted.get(row.scheduler_id)
            if occurrence is None:
                continue
            setting = settings.get(occurrence.setting_guid)
            source = sources.get(_ref(row))
            if isinstance(occurrence, ReminderImmediateInput):
                out[row.scheduler_id] = revalidate_immediate(
                    occurrence, row.input_hash, setting, source
                )
                continue
            verdict = revalidate_recurring(occurrence, row.input_hash, setting, source)
            out[row.scheduler_id] = verdict
            zone = zones.get(setting.business_unit_id) if setting is not None else None
            if verdict.kind is VerdictKind.VALID and setting and source and zone:
                following += successors(setting, source, zone, occurrence)
        if following:
            await scheduler_repo.ensure(conn, following, self.clock.now())
        await self._address(
            conn,
            {i: (o.setting_guid, _ref(r)) for r in rows if (o := wanted.get(i := r.scheduler_id))},
            {ref: src.attributes for ref, src in sources.items()},
            out,
        )
        return out

    async def _address(
        self,
        conn: Connection,
        targets: Mapping[int, tuple[UUID, tuple[str, UUID]]],
        attributes: Mapping[tuple[str, UUID], Mapping[str, Any]],
        out: dict[int, Outcome],
    ) -> None:
        """Resolve recipients, template and channels of the valid rows (one statement);
        ``targets``: scheduler_id → (its setting, its source)."""
        valid = {
            i: t
            for i, t in targets.items()
            if isinstance(v := out.get(i), Verdict) and v.kind is VerdictKind.VALID
        }
        if not valid:
            return
        configs = await self.inputs.delivery_settings(conn, {g for g, _ in valid.values()})
        for i, (setting_guid, source) in valid.items():
            out[i] = Resolved(
                VerdictKind.VALID,
                delivery=resolve_delivery(
                    configs.get(setting_guid),
                    attributes.get(source, {}),
                    self.recipients,
                    self.delivery,
                ),
            )


def _on_full_state(row: ClaimedRow) -> bool:
    return row.trigger_type == TriggerType.RECURRING.value or is_immediate_key(row.scheduler_key)


def _ref(row: ClaimedRow) -> tuple[str, UUID]:
    return (row.source_type or "", row.source_guid or UUID(int=0))


class ReportSubscriptionHandler:
    """Report runs: the subscription must still exist and be active."""

    automation_type = AutomationType.REPORT_SUBSCRIPTION

    def __init__(self, inputs: AutomationInputs, *, daily_retry: bool = False) -> None:
        self.inputs = inputs
        self.daily_retry = daily_retry

    async def revalidate(
        self, conn: Connection, rows: Sequence[ClaimedRow]
    ) -> Mapping[int, Outcome]:
        parsed, out = _occurrences(rows)
        wanted = {
            i: o
            for i, o in parsed.items()
            if isinstance(o, ReportScheduledInput | ReportManualInput)
        }
        out.update({i: Failure(UNKNOWN_KEY_FORMAT) for i in parsed if i not in wanted})
        subscriptions = await self.inputs.report_subscriptions(
            conn, {o.subscription_guid for o in wanted.values()}
        )
        for row in rows:
            occurrence = wanted.get(row.scheduler_id)
            if occurrence is not None:
                out[row.scheduler_id] = revalidate_report(
                    occurrence, row.input_hash, subscriptions.get(occurrence.subscription_guid)
                )
        return out


def default_handlers(
    inputs: AutomationInputs | None = None,
    *,
    daily_retry: Collection[AutomationType] = frozenset(),
    clock: Clock | None = None,
) -> HandlerRegistry:
    """The worker's registry: one handler per AutomationType over PostgreSQL; the types in
    ``daily_retry`` are approved as long-running (they retry daily after the ladder)."""
    port = inputs or PgAutomationInputs()
    approved = {AutomationType(t) for t in daily_retry}
    return HandlerRegistry(
        [
            ReminderHandler(port, daily_retry=AutomationType.REMINDER in approved, clock=clock),
            ReportSubscriptionHandler(
                port, daily_retry=AutomationType.REPORT_SUBSCRIPTION in approved
            ),
        ]
    )
