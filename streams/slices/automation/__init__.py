"""Automation scheduler (seed 003): the ``automation.scheduler`` rows, the inputs that ensure
and deactivate them, and the timers that execute them.

- timers.py: the core and the reconciliation jobs, installed without Faust:
  rows.py Ensure / Deactivate (the API the inputs call on their transaction); runner.py,
  timer ``automation-scheduler``, every instance: claim due rows (lease + new Version),
  revalidate through the handler of their AutomationType (handlers.py), finish under the
  token — Completed + DispatchRequested in the outbox, Deactivated with a ReasonCode, or back
  on the backoff ladder (what each outcome writes: batch_plan.py; the port to current
  state: execution_inputs.py); late writes of an expired claim are fenced; cleanup.py, timer
  ``automation-stale-cleanup``: expired leases back as interrupted (no attempt within the
  interruption allowance; past it, on the ladder and then held); reconcile.py, timers
  ``automation-reconcile-reminders`` / ``-reports``: bounded repair per trigger provider;
- stream.py: four agents (inputs.py) turn source, setting, BU and report subscription
  changes into Ensure/Deactivate through the planner (planner.py) and the trigger providers
  (streams/domain/automation/triggers.py); the /automation/hold view (web.py);
- support.py, cli.py: rows on hold on /status, and
  ``python -m streams automation release|retry-key|ensure|deactivate|show|hold``;
- metrics.py: the automation_scheduler_* family; demo.py: the demo workload; listings.py:
  scheduler rows by status (and on hold) in the operators' console.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streams.contracts import (
    BUSINESS_UNITS,
    DISPATCH_REQUESTED,
    REMINDER_SETTINGS,
    REPORT_SUBSCRIPTIONS,
    SOURCE_EVENTS,
)
from streams.slices.automation import actions as automation_actions
from streams.slices.automation.cleanup import CleanupConfig, StaleCleanup
from streams.slices.automation.cli import add_commands
from streams.slices.automation.config import AutomationConfig
from streams.slices.automation.execution_inputs import AutomationInputs, PgAutomationInputs
from streams.slices.automation.handlers import AutomationHandler, Failure, HandlerRegistry
from streams.slices.automation.listings import LISTINGS
from streams.slices.automation.metrics import AutomationMetrics
from streams.slices.automation.rows import SchedulerRows
from streams.slices.automation.runner import AutomationRunner, RunnerConfig
from streams.slices.automation.settings import AutomationSettings
from streams.slices.automation.timers import (
    AUTOMATION_RECONCILE_REMINDERS,
    AUTOMATION_RECONCILE_REPORTS,
    AUTOMATION_SCHEDULER,
    AUTOMATION_STALE_CLEANUP,
    AutomationCore,
    AutomationTimers,
    install_core,
    install_timers,
)
from streams.slices.slice import Demo, Slice

if TYPE_CHECKING:
    from streams.slices.context import SliceContext


def install_stream(ctx: SliceContext, timers: Any) -> None:
    from streams.slices.automation.stream import install_stream

    install_stream(ctx, timers)


def load_demo() -> Demo:
    from streams.slices.automation import demo

    return demo


SLICE = Slice(
    name="automation",
    settings=AutomationSettings,
    contracts=(
        SOURCE_EVENTS,
        REMINDER_SETTINGS,
        BUSINESS_UNITS,
        REPORT_SUBSCRIPTIONS,
        DISPATCH_REQUESTED,
    ),
    install_timers=install_timers,
    install_stream=install_stream,
    demo=load_demo,
    cli=add_commands,
    listings=LISTINGS,
    actions=automation_actions.ACTIONS,
)

__all__ = [
    "AUTOMATION_RECONCILE_REMINDERS",
    "AUTOMATION_RECONCILE_REPORTS",
    "AUTOMATION_SCHEDULER",
    "AUTOMATION_STALE_CLEANUP",
    "SLICE",
    "AutomationConfig",
    "AutomationCore",
    "AutomationHandler",
    "AutomationInputs",
    "AutomationMetrics",
    "AutomationRunner",
    "AutomationTimers",
    "CleanupConfig",
    "Failure",
    "HandlerRegistry",
    "PgAutomationInputs",
    "RunnerConfig",
    "SchedulerRows",
    "StaleCleanup",
    "install_core",
    "install_timers",
]
