"""The timer side of a worker, built without Faust: the runtime, the one timer registry (the
maintenance jobs) and every slice's timers. The timer process and ``python -m streams timers
run`` use it alone; the worker's app (streams/app.py) is built on it."""

from __future__ import annotations

from streams import slices
from streams.connection_budget import plan as connection_plan
from streams.outbox.config import RelayConfig
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.slice import TimerContext, install_timers
from streams.timers.store import build_registry


def create_timers(
    settings: Settings, runtime: Runtime | None = None, *, worker_id: str | None = None
) -> TimerContext:
    """The registry with every slice's schedules declared, not started."""
    RelayConfig.from_settings(settings)  # relay settings that cannot work stop startup here
    connection_plan(settings)  # so does a connection budget that leaves a pool nothing
    runtime = runtime or Runtime(settings)
    ctx = TimerContext(runtime, build_registry(runtime, worker_id))
    install_timers(slices.declared(), ctx)
    return ctx
