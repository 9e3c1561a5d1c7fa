"""Automation scheduler (seed 003): stage ① inputs and stage ② core.

Stage ① (install_inputs.py): four agents (inputs.py) turn source, setting, BU and report
subscription changes into Ensure/Deactivate through the planner (planning.py) and the
trigger providers (streams/domain/automation/triggers.py, automation_reports.py); bounded
reconciliation per provider (reconcile.py) repairs through the same key builders.

Stage ② core, the ``automation.scheduler`` rows:

- rows.py: Ensure / Deactivate (the API the automation inputs call on their transaction);
- runner.py: timer ``automation-scheduler``, every instance: claim due rows (lease + new
  Version), revalidate through the handler of their AutomationType (handlers.py), finish
  under the token — Completed + DispatchRequested in the outbox, Deactivated with a
  ReasonCode, or back on the backoff ladder; late writes of an expired claim are fenced;
- cleanup.py: timer ``automation-stale-cleanup``: expired leases back as interrupted (no
  attempt within the interruption allowance; past it, on the ladder and then held);
- support.py, web.py, cli.py: rows on hold on /status and /automation/hold, and
  ``python -m streams automation release|retry-key|ensure|deactivate|show|hold``;
- metrics.py: the automation_scheduler_* family.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from streams.slices.automation.cleanup import CleanupConfig, StaleCleanup
from streams.slices.automation.config import AutomationConfig
from streams.slices.automation.execution_inputs import AutomationInputs, PgAutomationInputs
from streams.slices.automation.handlers import (
    AutomationHandler,
    Failure,
    HandlerRegistry,
    default_handlers,
)
from streams.slices.automation.install_inputs import install_inputs
from streams.slices.automation.metrics import AutomationMetrics
from streams.slices.automation.rows import SchedulerRows
from streams.slices.automation.runner import AutomationRunner, RunnerConfig
from streams.slices.automation.support import status_section
from streams.slices.automation.web import hold_view
from streams.slices.context import SliceContext
from streams.timers.schedule import Mode, Schedule

AUTOMATION_SCHEDULER = "automation-scheduler"
AUTOMATION_STALE_CLEANUP = "automation-stale-cleanup"


@dataclass
class AutomationCore:
    """What the automation inputs build on: Ensure/Deactivate, the handler registry, the
    port to current state, and ``wake(at)`` to run the scheduler at a row's due time."""

    rows: SchedulerRows
    handlers: HandlerRegistry
    inputs: AutomationInputs
    runner: AutomationRunner
    cleanup: StaleCleanup
    config: AutomationConfig
    wake: Callable[[datetime | None], None]


def install_core(ctx: SliceContext) -> AutomationCore:
    """Register the scheduler's timers, metrics, /status section and support view; returns
    the core for the automation inputs (which install themselves on the same context)."""
    registry, runtime = ctx.registry, ctx.runtime
    config = AutomationConfig.from_settings(runtime.settings)
    metrics = runtime.metrics.family(AutomationMetrics)
    inputs = PgAutomationInputs()
    handlers = default_handlers(inputs, daily_retry=config.daily_retry_types, clock=runtime.clock)

    def wake(at: datetime | None = None) -> None:
        registry.wake(AUTOMATION_SCHEDULER, at=at)

    runner = AutomationRunner(
        runtime,
        handlers,
        RunnerConfig(
            batch_size=config.batch_size,
            lease=config.lease,
            backoff=config.backoff,
            interruption_allowance=config.interruption_allowance,
            interruption_delay=config.interruption_delay,
        ),
        metrics=metrics,
        on_next_due=wake,
    )
    spec = registry.register(
        Schedule(
            name=AUTOMATION_SCHEDULER,
            interval=timedelta(seconds=30),
            handler=runner,
            max_duration=timedelta(seconds=20),
            mode=Mode.EVERY_INSTANCE,
            settings_prefix="TIMER_AUTOMATION_SCHEDULER_",
        )
    )
    config.check_lease(spec.max_duration, "TIMER_AUTOMATION_SCHEDULER_MAX_DURATION_SECONDS")
    cleanup = StaleCleanup(
        runtime,
        handlers,
        CleanupConfig(
            batch_size=config.stale_batch_size,
            backoff=config.backoff,
            interruption_allowance=config.interruption_allowance,
            interruption_delay=config.interruption_delay,
        ),
        metrics=metrics,
        on_retry_due=wake,
    )
    registry.register(
        Schedule(
            name=AUTOMATION_STALE_CLEANUP,
            interval=timedelta(seconds=15),
            handler=cleanup,
            max_duration=timedelta(seconds=10),
            mode=Mode.EVERY_INSTANCE,
            settings_prefix="TIMER_AUTOMATION_STALE_CLEANUP_",
        )
    )
    ctx.status("automation", status_section(runtime, metrics))
    ctx.page("/automation/hold", hold_view(runtime, config.hold_view_limit))
    # A (re)started worker catches up on due rows now, not at the next slot.
    ctx.on_started.append(wake)
    return AutomationCore(
        SchedulerRows(metrics, wake), handlers, inputs, runner, cleanup, config, wake
    )


def install(ctx: SliceContext) -> None:
    core = install_core(ctx)
    install_inputs(ctx, core)


__all__ = [
    "AUTOMATION_SCHEDULER",
    "AUTOMATION_STALE_CLEANUP",
    "AutomationConfig",
    "AutomationCore",
    "AutomationHandler",
    "AutomationInputs",
    "AutomationMetrics",
    "AutomationRunner",
    "CleanupConfig",
    "Failure",
    "HandlerRegistry",
    "PgAutomationInputs",
    "RunnerConfig",
    "SchedulerRows",
    "StaleCleanup",
    "install",
    "install_core",
]
