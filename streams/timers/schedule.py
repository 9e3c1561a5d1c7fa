"""Declaring a periodic schedule: modes, misfire policies, env overrides and startup validation."""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from streams.timers.context import RunContext
from streams.timers.retries import (
    DEFAULT_ATTEMPTS,
    DEFAULT_BACKOFF,
    MAX_ATTEMPTS,
    MAX_BACKOFF,
    RetryPolicy,
)
from streams.timers.slots import Cadence, min_period, next_fire

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
_PREFIX = re.compile(r"^[A-Z][A-Z0-9_]*_$")
# Catch-up replays at most this many slots; a longer window is a configuration mistake.
MAX_CATCH_UP_SLOTS = 1000
# Default grace: a slot started this late still counts as on time (bounded, see resolve()).
_MAX_DEFAULT_GRACE = timedelta(seconds=60)
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class Mode(StrEnum):
    """Who runs a slot."""

    # Each worker runs every slot; the handler shares the work itself (SKIP LOCKED claims).
    EVERY_INSTANCE = "every_instance"
    # One run per slot across all workers: the slot is claimed insert-wins in PostgreSQL.
    CLUSTER_ONCE = "cluster_once"


class Misfire(StrEnum):
    """What to do with slots whose time passed without a run (downtime, an overrun)."""

    SKIP = "skip"
    CATCH_UP = "catch_up"
    COALESCE = "coalesce"


class Handler(Protocol):
    async def run_once(self, ctx: RunContext) -> object:
        """Do one run's work as of ``ctx.as_of`` by ``ctx.deadline``; the result is
        summarised for list()."""
        ...


class RegistrationError(Exception):
    """A schedule cannot be registered; the message names the schedule and the setting."""

    def __init__(self, schedule: str, setting: str, problem: str) -> None:
        super().__init__(f"timer schedule {schedule!r}: setting {setting}: {problem}")
        self.schedule = schedule
        self.setting = setting
        self.problem = problem


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """A periodic job as declared in code; env settings under ``settings_prefix`` override it.

    Env overrides (all optional): ``<PREFIX>INTERVAL_SECONDS``, ``<PREFIX>CRON``,
    ``<PREFIX>TIMEZONE``, ``<PREFIX>MAX_DURATION_SECONDS``, ``<PREFIX>ENABLED``,
    ``<PREFIX>MISFIRE``, ``<PREFIX>CATCH_UP_WINDOW_SECONDS``, ``<PREFIX>MISFIRE_GRACE_SECONDS``,
    ``<PREFIX>RETRY_ATTEMPTS``, ``<PREFIX>RETRY_BACKOFF_SECONDS``.
    """

    name: str
    # An object with ``async def run_once(ctx)``, or the name of one given to the registry.
    handler: Handler | str
    max_duration: timedelta
    mode: Mode
    interval: timedelta | None = None
    cron: str | None = None
    # IANA zone the cron is read in; None = UTC.
    timezone: str | None = None
    misfire: Misfire = Misfire.SKIP
    # Catch-up replays missed slots no older than this; required for Misfire.CATCH_UP.
    catch_up_window: timedelta | None = None
    # How late a slot may start and still count as on time; default min(period / 2, 60 s).
    misfire_grace: timedelta | None = None
    settings_prefix: str | None = None
    enabled: bool = True
    # Runs in the worker's timer process (its own event loop and core, away from the
    # agents' input batches) when the worker has one: for timers with a lateness target.
    isolated: bool = False
    # Cluster-once: attempts of one slot in all (a failed, timed-out or cancelled run is
    # retried after the backoff, doubling), within the misfire policy's retry window.
    retry_attempts: int = DEFAULT_ATTEMPTS
    retry_backoff: timedelta = DEFAULT_BACKOFF


@dataclass(frozen=True)
class ResolvedSchedule:
    """A validated schedule with env overrides applied: what the registry runs."""

    name: str
    handler: Handler
    cadence: Cadence
    max_duration: timedelta
    mode: Mode
    misfire: Misfire
    catch_up_window: timedelta | None
    misfire_grace: timedelta
    enabled: bool
    settings_prefix: str | None
    isolated: bool = False
    retry: RetryPolicy = field(default_factory=RetryPolicy)


class _Settings:
    """Reads one schedule's env overrides and names settings in error messages."""

    def __init__(self, schedule: Schedule, environ: Mapping[str, str]) -> None:
        self.schedule = schedule
        self.environ = environ
        self.from_env: set[str] = set()

    def label(self, field: str, suffix: str) -> str:
        prefix = self.schedule.settings_prefix
        if prefix is None:
            return field
        env = f"{prefix}{suffix}"
        return env if suffix in self.from_env else f"{field} (env {env})"

    def fail(self, field: str, suffix: str, problem: str) -> RegistrationError:
        return RegistrationError(self.schedule.name, self.label(field, suffix), problem)

    def raw(self, suffix: str) -> str | None:
        prefix = self.schedule.settings_prefix
        if prefix is None:
            return None
        value = self.environ.get(f"{prefix}{suffix}")
        # An empty variable (common in compose files) means "not set".
        if value is None or not value.strip():
            return None
        self.from_env.add(suffix)
        return value.strip()

    def seconds(self, field: str, suffix: str, default: timedelta | None) -> timedelta | None:
        value = self.raw(suffix)
        if value is None:
            return default
        try:
            seconds = float(value)
        except ValueError:
            raise self.fail(field, suffix, f"not a number of seconds: {value!r}") from None
        if not math.isfinite(seconds):
            raise self.fail(field, suffix, f"not a finite number of seconds: {value!r}")
        return timedelta(seconds=seconds)

    def integer(self, field: str, suffix: str, default: int) -> int:
        value = self.raw(suffix)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            raise self.fail(field, suffix, f"not an integer: {value!r}") from None

    def text(self, suffix: str, default: str | None) -> str | None:
        value = self.raw(suffix)
        return default if value is None else value

    def flag(self, field: str, suffix: str, default: bool) -> bool:
        value = self.raw(suffix)
        if value is None:
            return default
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        raise self.fail(field, suffix, f"not a boolean (true/false): {value!r}")


def _handler(schedule: Schedule, handlers: Mapping[str, Handler]) -> Handler:
    handler = schedule.handler
    if isinstance(handler, str):
        if handler not in handlers:
            known = ", ".join(sorted(handlers)) or "none"
            raise RegistrationError(
                schedule.name, "handler", f"unknown handler {handler!r} (known: {known})"
            )
        handler = handlers[handler]
    if not inspect.iscoroutinefunction(getattr(handler, "run_once", None)):
        raise RegistrationError(
            schedule.name,
            "handler",
            f"{type(handler).__name__} has no 'async def run_once(ctx)'",
        )
    return handler


def _cron_problem(expr: str, timezone: str | None, now: datetime) -> str | None:
    if not croniter.is_valid(expr):
        return f"invalid cron expression {expr!r}"
    try:
        next_fire(Cadence(cron=expr, timezone=timezone), now)
    except Exception:
        return f"cron expression {expr!r} never fires"
    return None


def resolve(
    schedule: Schedule,
    *,
    environ: Mapping[str, str],
    handlers: Mapping[str, Handler],
    now: datetime,
) -> ResolvedSchedule:
    """Apply env overrides and validate; raises RegistrationError on the first problem."""
    name = schedule.name
    if not isinstance(name, str) or not _NAME.match(name):
        raise RegistrationError(
            str(name), "name", "must match [a-z0-9][a-z0-9._-]* (max 100 chars, no ':')"
        )
    prefix = schedule.settings_prefix
    if prefix is not None and not _PREFIX.match(prefix):
        raise RegistrationError(name, "settings_prefix", f"must look like TIMER_X_, got {prefix!r}")
    env = _Settings(schedule, environ)
    enabled = env.flag("enabled", "ENABLED", schedule.enabled)

    interval = env.seconds("interval", "INTERVAL_SECONDS", None)
    cron = env.text("CRON", None)
    if interval is not None and cron is not None:
        raise RegistrationError(
            name, f"{prefix}INTERVAL_SECONDS and {prefix}CRON", "set one of them, not both"
        )
    if interval is None and cron is None:
        interval, cron = schedule.interval, schedule.cron
        if interval is not None and cron is not None:
            raise RegistrationError(name, "interval and cron", "give one of them, not both")
        if interval is None and cron is None:
            raise RegistrationError(name, "interval or cron", "one of them is required")
    timezone = env.text("TIMEZONE", schedule.timezone)

    if interval is not None:
        if interval <= timedelta(0):
            raise env.fail("interval", "INTERVAL_SECONDS", f"must be > 0, got {interval}")
        if timezone is not None and timezone != "UTC":
            raise env.fail("timezone", "TIMEZONE", "a time zone applies to cron schedules only")
        cadence = Cadence(interval=interval)
    else:
        assert cron is not None
        if timezone is not None:
            try:
                ZoneInfo(timezone)
            except (ZoneInfoNotFoundError, ValueError):
                raise env.fail(
                    "timezone", "TIMEZONE", f"unknown IANA time zone {timezone!r}"
                ) from None
        problem = _cron_problem(cron, timezone, now)
        if problem:
            raise env.fail("cron", "CRON", problem)
        cadence = Cadence(cron=cron, timezone=timezone)
    period = min_period(cadence, now)

    max_duration = env.seconds("max_duration", "MAX_DURATION_SECONDS", schedule.max_duration)
    assert max_duration is not None
    if max_duration <= timedelta(0):
        raise env.fail("max_duration", "MAX_DURATION_SECONDS", f"must be > 0, got {max_duration}")
    mode = schedule.mode
    if not isinstance(mode, Mode):
        raise RegistrationError(name, "mode", f"must be a Mode, got {mode!r}")
    if mode is Mode.EVERY_INSTANCE and max_duration >= period:
        raise env.fail(
            "max_duration",
            "MAX_DURATION_SECONDS",
            f"{max_duration.total_seconds():g}s must be shorter than the period "
            f"({period.total_seconds():g}s) of an every-instance schedule",
        )

    misfire_text = env.text("MISFIRE", None)
    misfire = schedule.misfire
    if misfire_text is not None:
        try:
            misfire = Misfire(misfire_text.lower().replace("-", "_"))
        except ValueError:
            raise env.fail(
                "misfire", "MISFIRE", f"must be skip, catch_up or coalesce, got {misfire_text!r}"
            ) from None
    window = env.seconds("catch_up_window", "CATCH_UP_WINDOW_SECONDS", schedule.catch_up_window)
    if misfire is Misfire.CATCH_UP:
        if window is None or window <= timedelta(0):
            raise env.fail(
                "catch_up_window", "CATCH_UP_WINDOW_SECONDS", "misfire=catch_up needs a window > 0"
            )
        if cadence.interval is not None and window > cadence.interval * MAX_CATCH_UP_SLOTS:
            raise env.fail(
                "catch_up_window",
                "CATCH_UP_WINDOW_SECONDS",
                f"covers more than {MAX_CATCH_UP_SLOTS} slots",
            )
    elif window is not None:
        raise env.fail(
            "catch_up_window", "CATCH_UP_WINDOW_SECONDS", "applies only to misfire=catch_up"
        )
    grace = env.seconds("misfire_grace", "MISFIRE_GRACE_SECONDS", schedule.misfire_grace)
    if grace is None:
        grace = min(period / 2, _MAX_DEFAULT_GRACE)
    elif not timedelta(0) < grace <= period:
        raise env.fail(
            "misfire_grace",
            "MISFIRE_GRACE_SECONDS",
            f"must be > 0 and at most the period ({period.total_seconds():g}s)",
        )

    attempts = env.integer("retry_attempts", "RETRY_ATTEMPTS", schedule.retry_attempts)
    if not 1 <= attempts <= MAX_ATTEMPTS:
        raise env.fail(
            "retry_attempts", "RETRY_ATTEMPTS", f"must be in 1..{MAX_ATTEMPTS}, got {attempts}"
        )
    backoff = env.seconds("retry_backoff", "RETRY_BACKOFF_SECONDS", schedule.retry_backoff)
    assert backoff is not None
    if not timedelta(0) <= backoff <= MAX_BACKOFF:
        raise env.fail(
            "retry_backoff",
            "RETRY_BACKOFF_SECONDS",
            f"must be >= 0 and at most {MAX_BACKOFF.total_seconds():g}s",
        )

    return ResolvedSchedule(
        name=name,
        handler=_handler(schedule, handlers),
        cadence=cadence,
        max_duration=max_duration,
        mode=mode,
        misfire=misfire,
        catch_up_window=window,
        misfire_grace=grace,
        enabled=enabled,
        settings_prefix=prefix,
        isolated=schedule.isolated,
        retry=RetryPolicy(attempts, backoff),
    )
