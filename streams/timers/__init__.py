"""Periodic-task registry: every timer of the service is declared and run here."""

from streams.timers.context import RunContext
from streams.timers.drain import DrainOutcome, drain
from streams.timers.metrics import TimerMetrics
from streams.timers.ports import ClockSleeper, Sleeper, TimerStore
from streams.timers.registry import TimerRegistry
from streams.timers.retries import HandBack, RetryPolicy
from streams.timers.runs import RunRecord, summarize
from streams.timers.schedule import (
    Handler,
    Misfire,
    Mode,
    RegistrationError,
    ResolvedSchedule,
    Schedule,
)
from streams.timers.slots import (
    Cadence,
    SlotRange,
    cron_next,
    cron_slot,
    fanout_key,
    interval_slot,
    next_fire,
    slot_at,
    slot_key,
    slots_between,
)

__all__ = [
    "Cadence",
    "ClockSleeper",
    "DrainOutcome",
    "HandBack",
    "Handler",
    "Misfire",
    "Mode",
    "RegistrationError",
    "ResolvedSchedule",
    "RetryPolicy",
    "RunContext",
    "RunRecord",
    "Schedule",
    "Sleeper",
    "SlotRange",
    "TimerMetrics",
    "TimerRegistry",
    "TimerStore",
    "cron_next",
    "cron_slot",
    "drain",
    "fanout_key",
    "interval_slot",
    "next_fire",
    "slot_at",
    "slot_key",
    "slots_between",
    "summarize",
]
