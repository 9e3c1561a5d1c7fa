"""The /timers view: one plain JSON-able dict per schedule."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from streams.timers.logfmt import iso
from streams.timers.state import ScheduleState


def schedule_view(state: ScheduleState, now: datetime) -> dict[str, Any]:
    """A schedule's settings, whether it runs now, when it fires next and what its runs did."""
    spec, stats = state.spec, state.stats
    cadence = spec.cadence
    return {
        "name": spec.name,
        "mode": spec.mode.value,
        "enabled": spec.enabled,
        "paused": state.paused is True,
        "interval_seconds": (
            cadence.interval.total_seconds() if cadence.interval is not None else None
        ),
        "cron": cadence.cron,
        "timezone": (cadence.timezone or "UTC") if cadence.cron else None,
        "misfire": spec.misfire.value,
        "catch_up_window_seconds": (
            spec.catch_up_window.total_seconds() if spec.catch_up_window else None
        ),
        "misfire_grace_seconds": spec.misfire_grace.total_seconds(),
        "max_duration_seconds": spec.max_duration.total_seconds(),
        "retry_attempts": spec.retry.attempts,
        "retry_backoff_seconds": spec.retry.backoff.total_seconds(),
        "running": state.current is not None,
        "next_fire_at": iso(state.next_fire_at(now)),
        "last_slot": iso(stats.last_slot),
        "last_started_at": iso(stats.last_started_at),
        "last_duration_seconds": stats.last_duration_seconds,
        "last_result": stats.last_result,
        "last_summary": stats.last_summary,
        "last_error": stats.last_error,
        "last_run_id": stats.last_run_id,
        "counts": stats.counts(),
    }
