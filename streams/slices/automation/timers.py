"""The automation slice's timers: the scheduler core (claim + execute, stale cleanup, the
/status section) and the bounded reconciliation jobs, with what the input agents build on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from streams.domain.automation.triggers import default_providers
from streams.slices.automation.cleanup import CleanupConfig, StaleCleanup
from streams.slices.automation.config import AutomationConfig
from streams.slices.automation.execution_inputs import AutomationInputs, PgAutomationInputs
from streams.slices.automation.fanout import FanOutDrainer
from streams.slices.automation.handlers import HandlerRegistry, default_handlers
from streams.slices.automation.metrics import AutomationMetrics
from streams.slices.automation.planner import Planned, Planner
from streams.slices.automation.reconcile import (
    REPORTS_PROVIDER,
    SETTINGS_PROVIDER,
    SOURCES_PROVIDER,
    UNITS_PROVIDER,
    ReconcileConfig,
    Reconciliation,
)
from streams.slices.automation.rows import SchedulerRows
from streams.slices.automation.runner import AutomationRunner, RunnerConfig
from streams.slices.automation.settings import AutomationSettings
from streams.slices.automation.support import status_section
from streams.slices.slice import TimerContext
from streams.timers.schedule import Mode, Schedule

AUTOMATION_SCHEDULER = "automation-scheduler"
AUTOMATION_STALE_CLEANUP = "automation-stale-cleanup"
AUTOMATION_RECONCILE_REMINDERS = "automation-reconcile-reminders"
AUTOMATION_RECONCILE_REPORTS = "automation-reconcile-reports"
AUTOMATION_FANOUT = "automation-fanout"


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


@dataclass
class AutomationTimers:
    """What ``install_timers`` hands the stream part: the core and the planner of the inputs
    (shared with reconciliation), and how a plan wakes the scheduler."""

    core: AutomationCore
    planner: Planner
    wake_fanout: Callable[[], None] = lambda: None

    def wake_for(self, planned: Planned) -> None:
        self.core.rows.wake_for(planned.candidates, planned.ensured)
        if planned.unfinished:
            self.wake_fanout()  # the rest of a fan-out, in the drainer's transactions


def install_core(ctx: TimerContext) -> AutomationCore:
    """Register the scheduler's timers, metrics and /status section; returns the core for
    the automation inputs and reconciliation."""
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
    # A (re)started worker catches up on due rows now, not at the next slot.
    ctx.on_started.append(wake)
    return AutomationCore(
        SchedulerRows(metrics, wake), handlers, inputs, runner, cleanup, config, wake
    )


def install_reconciliation(ctx: TimerContext, core: AutomationCore) -> AutomationTimers:
    """The inputs' planner on the core's Ensure/Deactivate, and the two bounded
    reconciliation jobs that repair through it."""
    runtime, registry = ctx.runtime, ctx.registry
    settings = runtime.settings.of(AutomationSettings)
    planner = Planner(
        core.rows,
        default_providers(),
        timedelta(days=settings.automation_report_window_days),
        chunk_sources=settings.automation_fanout_chunk_sources,
    )

    def wake_fanout() -> None:
        registry.wake(AUTOMATION_FANOUT)

    timers = AutomationTimers(core, planner, wake_fanout)
    registry.register(
        Schedule(
            name=AUTOMATION_FANOUT,
            interval=timedelta(seconds=30),
            handler=FanOutDrainer(
                runtime,
                planner,
                park_after=settings.automation_fanout_park_after,
                on_planned=timers.wake_for,
                on_more=wake_fanout,
            ),
            max_duration=timedelta(seconds=20),
            mode=Mode.EVERY_INSTANCE,
            settings_prefix="TIMER_AUTOMATION_FANOUT_",
        )
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
                    on_planned=timers.wake_for,
                ),
                max_duration=timedelta(minutes=5),
                mode=Mode.CLUSTER_ONCE,
                settings_prefix=f"TIMER_{name.upper().replace('-', '_')}_",
            )
        )
    return timers


def install_timers(ctx: TimerContext) -> AutomationTimers:
    return install_reconciliation(ctx, install_core(ctx))
