"""Stage ① wiring: the four input agents and the bounded reconciliation job, on the core's
Ensure/Deactivate (``AutomationCore.rows``) and wake-up."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from streams.contracts import (
    BUSINESS_UNITS,
    REMINDER_SETTINGS,
    REPORT_SUBSCRIPTIONS,
    SOURCE_EVENTS,
)
from streams.contracts.automation import (
    BusinessUnitChanged,
    ReminderSettingChanged,
    ReportSubscriptionChanged,
    SourceEntityChanged,
)
from streams.domain.automation.triggers import default_providers
from streams.slices.automation.inputs import (
    PlanningApplier,
    SettingsWriter,
    SourcesWriter,
    SubscriptionsWriter,
    UnitsWriter,
)
from streams.slices.automation.planner import Planned, Planner
from streams.slices.automation.reconcile import (
    REPORTS_PROVIDER,
    SETTINGS_PROVIDER,
    SOURCES_PROVIDER,
    UNITS_PROVIDER,
    ReconcileConfig,
    Reconciliation,
)
from streams.slices.automation.settings import AutomationSettings
from streams.slices.context import SliceContext
from streams.timers.schedule import Mode, Schedule

if TYPE_CHECKING:
    from streams.slices.automation import AutomationCore

AUTOMATION_RECONCILE_REMINDERS = "automation-reconcile-reminders"
AUTOMATION_RECONCILE_REPORTS = "automation-reconcile-reports"


def install_inputs(ctx: SliceContext, core: AutomationCore) -> Planner:
    runtime, registry = ctx.runtime, ctx.registry
    settings = runtime.settings.of(AutomationSettings)
    planner = Planner(
        core.rows,
        default_providers(),
        timedelta(days=settings.automation_report_window_days),
    )

    def wake_for(planned: Planned) -> None:
        core.rows.wake_for(planned.candidates, planned.ensured)

    ctx.input(
        "automation-source-events",
        SOURCE_EVENTS,
        PlanningApplier[SourceEntityChanged](runtime, SourcesWriter(planner), wake_for),
    )
    ctx.input(
        "automation-reminder-settings",
        REMINDER_SETTINGS,
        PlanningApplier[ReminderSettingChanged](runtime, SettingsWriter(planner), wake_for),
    )
    ctx.input(
        "automation-business-units",
        BUSINESS_UNITS,
        PlanningApplier[BusinessUnitChanged](runtime, UnitsWriter(planner), wake_for),
    )
    ctx.input(
        "automation-report-subscriptions",
        REPORT_SUBSCRIPTIONS,
        PlanningApplier[ReportSubscriptionChanged](runtime, SubscriptionsWriter(planner), wake_for),
    )

    config = ReconcileConfig(
        units=ReconcileConfig.parse_units(settings.automation_reconcile_units),
        batch_size=settings.automation_reconcile_batch_size,
        window_days=settings.automation_reconcile_window_days,
        settle=timedelta(seconds=settings.automation_reconcile_settle_seconds),
    )
    # Two low-frequency jobs: the reminders' repair paths (sources, settings, business units,
    # each with its own watermark) and the report subscriptions'.
    reminder_paths = (SOURCES_PROVIDER, SETTINGS_PROVIDER, UNITS_PROVIDER)
    for name, providers in (
        (AUTOMATION_RECONCILE_REMINDERS, reminder_paths),
        (AUTOMATION_RECONCILE_REPORTS, (REPORTS_PROVIDER,)),
    ):
        registry.register(
            Schedule(
                name=name,
                interval=timedelta(hours=1),
                handler=Reconciliation(
                    runtime,
                    planner,
                    config,
                    providers=providers,
                    on_planned=wake_for,
                ),
                max_duration=timedelta(minutes=5),
                mode=Mode.CLUSTER_ONCE,
                settings_prefix=f"TIMER_{name.upper().replace('-', '_')}_",
            )
        )
    return planner
