"""The automation slice's stream part: the four input agents on the planner (Ensure/Deactivate
through the core), and the /automation/hold support view."""

from __future__ import annotations

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
from streams.slices.automation.inputs import (
    PlanningApplier,
    SettingsWriter,
    SourcesWriter,
    SubscriptionsWriter,
    UnitsWriter,
)
from streams.slices.automation.timers import AutomationTimers
from streams.slices.automation.web import hold_view
from streams.slices.context import SliceContext


def install_stream(ctx: SliceContext, timers: AutomationTimers) -> None:
    runtime, planner, wake_for = ctx.runtime, timers.planner, timers.wake_for
    ctx.page("/automation/hold", hold_view(runtime, timers.core.config.hold_view_limit))
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
