"""Declaring schedules: env overrides; every invalid registration fails with a clear message."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devkit.harness.timer_fakes import InMemoryTimerStore
from streams.clock import ManualClock
from streams.timers import (
    Misfire,
    Mode,
    RegistrationError,
    Schedule,
    TimerRegistry,
)
from streams.timers.context import RunContext

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)
PREFIX = "TIMER_CALENDAR_DISPATCH_"
EVERY_INSTANCE = Mode.EVERY_INSTANCE


class Dispatcher:
    async def run_once(self, ctx: RunContext) -> int:
        return 0


class SyncHandler:
    def run_once(self, ctx: RunContext) -> int:
        return 0


def registry(
    env: Mapping[str, str] | None = None, *, store: bool = True, **kwargs: Any
) -> TimerRegistry:
    return TimerRegistry(
        store=InMemoryTimerStore() if store else None,
        clock=ManualClock(T0),
        environ=env or {},
        **kwargs,
    )


def schedule(**overrides: Any) -> Schedule:
    base = Schedule(
        name="calendar-dispatch",
        interval=timedelta(seconds=60),
        handler=Dispatcher(),
        max_duration=timedelta(seconds=30),
        mode=Mode.EVERY_INSTANCE,
        settings_prefix=PREFIX,
    )
    return replace(base, **overrides)


def test_calendar_dispatch_is_declared_in_three_lines() -> None:
    registry = TimerRegistry(clock=ManualClock(T0), environ={})
    dispatcher = Dispatcher()
    registry.register(Schedule(name="calendar-dispatch", handler=dispatcher, mode=EVERY_INSTANCE,
        interval=timedelta(seconds=60), max_duration=timedelta(seconds=30),
        settings_prefix="TIMER_CALENDAR_DISPATCH_"))  # fmt: skip
    [listed] = registry.list()
    assert listed["name"] == "calendar-dispatch"
    assert listed["interval_seconds"] == 60.0
    assert listed["mode"] == "every_instance"


def test_env_overrides_code_defaults() -> None:
    env = {
        f"{PREFIX}INTERVAL_SECONDS": "15",
        f"{PREFIX}MAX_DURATION_SECONDS": "5",
        f"{PREFIX}MISFIRE": "coalesce",
        f"{PREFIX}MISFIRE_GRACE_SECONDS": "2",
        f"{PREFIX}ENABLED": "false",
    }
    spec = registry(env).register(schedule())
    assert spec.cadence.interval == timedelta(seconds=15)
    assert spec.max_duration == timedelta(seconds=5)
    assert spec.misfire is Misfire.COALESCE
    assert spec.misfire_grace == timedelta(seconds=2)
    assert spec.enabled is False


def test_env_can_turn_an_interval_into_a_zoned_cron() -> None:
    env = {f"{PREFIX}CRON": "*/5 * * * *", f"{PREFIX}TIMEZONE": "Europe/Berlin"}
    spec = registry(env).register(schedule())
    assert spec.cadence.interval is None
    assert (spec.cadence.cron, spec.cadence.timezone) == ("*/5 * * * *", "Europe/Berlin")


def test_empty_env_values_mean_unset() -> None:
    spec = registry({f"{PREFIX}INTERVAL_SECONDS": " "}).register(schedule())
    assert spec.cadence.interval == timedelta(seconds=60)


def test_default_grace_is_half_the_period_at_most_a_minute() -> None:
    reg = registry()
    assert reg.register(schedule()).misfire_grace == timedelta(seconds=30)
    daily = reg.register(
        schedule(name="daily", interval=None, cron="0 3 * * *", mode=Mode.CLUSTER_ONCE)
    )
    assert daily.misfire_grace == timedelta(seconds=60)


def test_cluster_once_may_run_longer_than_its_interval() -> None:
    spec = registry().register(schedule(max_duration=timedelta(minutes=5), mode=Mode.CLUSTER_ONCE))
    assert spec.max_duration == timedelta(minutes=5)


def test_handlers_can_be_named() -> None:
    dispatcher = Dispatcher()
    spec = registry(handlers={"dispatcher": dispatcher}).register(schedule(handler="dispatcher"))
    assert spec.handler is dispatcher


# Each invalid declaration: (overrides, env, setting named in the message, problem fragment).
INVALID: list[tuple[str, dict[str, Any], dict[str, str], str, str]] = [
    ("bad cron", {"interval": None, "cron": "61 * * * *"}, {}, "cron", "invalid cron"),
    (
        "cron that never fires",
        {"interval": None, "cron": "0 0 31 2 *", "mode": Mode.CLUSTER_ONCE},
        {},
        "cron",
        "never fires",
    ),
    ("bad cron from env", {}, {f"{PREFIX}CRON": "not a cron"}, f"{PREFIX}CRON", "invalid cron"),
    ("zero interval", {"interval": timedelta(0)}, {}, "interval", "> 0"),
    ("negative interval", {"interval": timedelta(seconds=-1)}, {}, "interval", "> 0"),
    (
        "zero interval from env",
        {},
        {f"{PREFIX}INTERVAL_SECONDS": "0"},
        f"{PREFIX}INTERVAL_SECONDS",
        "> 0",
    ),
    (
        "interval not a number",
        {},
        {f"{PREFIX}INTERVAL_SECONDS": "1m"},
        f"{PREFIX}INTERVAL_SECONDS",
        "not a number",
    ),
    (
        "interval not finite",
        {},
        {f"{PREFIX}INTERVAL_SECONDS": "inf"},
        f"{PREFIX}INTERVAL_SECONDS",
        "finite",
    ),
    (
        "max duration equal to interval (every instance)",
        {"max_duration": timedelta(seconds=60)},
        {},
        "max_duration",
        "shorter than the period",
    ),
    (
        "max duration from env longer than interval",
        {},
        {f"{PREFIX}MAX_DURATION_SECONDS": "90"},
        f"{PREFIX}MAX_DURATION_SECONDS",
        "shorter than the period",
    ),
    (
        "max duration longer than a cron's period",
        {"interval": None, "cron": "*/1 * * * *", "max_duration": timedelta(seconds=61)},
        {},
        "max_duration",
        "shorter than the period",
    ),
    ("zero max duration", {"max_duration": timedelta(0)}, {}, "max_duration", "> 0"),
    ("unknown handler", {"handler": "dispatcher"}, {}, "handler", "unknown handler"),
    ("handler without async run_once", {"handler": SyncHandler()}, {}, "handler", "run_once"),
    ("handler without run_once", {"handler": object()}, {}, "handler", "run_once"),
    ("neither interval nor cron", {"interval": None}, {}, "interval or cron", "required"),
    (
        "both interval and cron",
        {"cron": "* * * * *"},
        {},
        "interval and cron",
        "not both",
    ),
    (
        "both from env",
        {},
        {f"{PREFIX}CRON": "* * * * *", f"{PREFIX}INTERVAL_SECONDS": "5"},
        f"{PREFIX}INTERVAL_SECONDS and {PREFIX}CRON",
        "not both",
    ),
    (
        "unknown time zone",
        {"interval": None, "cron": "0 9 * * *", "timezone": "Mars/Olympus"},
        {},
        "timezone",
        "unknown IANA",
    ),
    ("time zone on an interval", {"timezone": "Europe/Berlin"}, {}, "timezone", "cron"),
    ("catch-up without window", {"misfire": Misfire.CATCH_UP}, {}, "catch_up_window", "window"),
    (
        "catch-up window on skip",
        {"catch_up_window": timedelta(minutes=5)},
        {},
        "catch_up_window",
        "only",
    ),
    (
        "catch-up window too long",
        {"misfire": Misfire.CATCH_UP, "catch_up_window": timedelta(days=365)},
        {},
        "catch_up_window",
        "more than",
    ),
    (
        "bad misfire from env",
        {},
        {f"{PREFIX}MISFIRE": "later"},
        f"{PREFIX}MISFIRE",
        "skip, catch_up or coalesce",
    ),
    (
        "bad enabled from env",
        {},
        {f"{PREFIX}ENABLED": "maybe"},
        f"{PREFIX}ENABLED",
        "boolean",
    ),
    (
        "grace longer than the period",
        {"misfire_grace": timedelta(minutes=2)},
        {},
        "misfire_grace",
        "at most the period",
    ),
    ("bad settings prefix", {"settings_prefix": "timer-x"}, {}, "settings_prefix", "TIMER_X_"),
]


@pytest.mark.parametrize(
    ("overrides", "env", "setting", "problem"),
    [case[1:] for case in INVALID],
    ids=[case[0] for case in INVALID],
)
def test_invalid_registration_names_the_schedule_and_the_setting(
    overrides: dict[str, Any], env: dict[str, str], setting: str, problem: str
) -> None:
    reg = registry(env)
    with pytest.raises(RegistrationError) as caught:
        reg.register(schedule(**overrides))
    err = caught.value
    assert err.schedule == "calendar-dispatch"
    assert err.setting == setting or err.setting.startswith(f"{setting} (env ")
    assert "'calendar-dispatch'" in str(err)
    assert setting in str(err)
    assert problem in str(err)
    assert reg.names == ()


def test_code_values_name_the_env_var_that_would_override_them() -> None:
    with pytest.raises(RegistrationError, match=r"interval \(env TIMER_CALENDAR_DISPATCH_INT"):
        registry().register(schedule(interval=timedelta(0)))


def test_duplicate_name_fails() -> None:
    reg = registry()
    reg.register(schedule())
    with pytest.raises(RegistrationError, match=r"'calendar-dispatch'.*duplicate"):
        reg.register(schedule(interval=timedelta(minutes=5)))


@pytest.mark.parametrize("name", ["", "Calendar", "a:b", "with space", "x" * 101])
def test_bad_names_fail(name: str) -> None:
    with pytest.raises(RegistrationError) as caught:
        registry().register(schedule(name=name))
    assert caught.value.setting == "name"


def test_cluster_once_needs_a_store() -> None:
    with pytest.raises(RegistrationError, match=r"'calendar-dispatch'.*mode.*store"):
        registry(store=False).register(schedule(mode=Mode.CLUSTER_ONCE))


async def test_registration_after_start_fails() -> None:
    reg = registry()
    reg.register(schedule())
    await reg.start()
    try:
        with pytest.raises(RegistrationError, match=r"'late'.*after the timer registry started"):
            reg.register(schedule(name="late"))
    finally:
        await reg.stop(timeout=1)


async def test_registration_after_a_burst_step_fails() -> None:
    reg = registry()
    await reg.run_due()
    with pytest.raises(RegistrationError, match="after"):
        reg.register(schedule())


def test_register_all_adds_nothing_when_one_schedule_is_invalid() -> None:
    reg = registry()
    good = schedule(name="good")
    with pytest.raises(RegistrationError, match="'bad'"):
        reg.register_all([good, schedule(name="bad", interval=timedelta(0))])
    with pytest.raises(RegistrationError, match=r"'good'.*duplicate"):
        reg.register_all([good, good])
    assert reg.names == ()
    assert [s.name for s in reg.register_all([good, schedule(name="other")])] == ["good", "other"]
