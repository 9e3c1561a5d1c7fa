"""Automation settings: the per-AutomationType daily-retry approval is validated at startup."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streams.contracts.automation import AutomationType
from streams.settings import ConfigError, Settings
from streams.slices.automation.config import AutomationConfig, parse_automation_types
from streams.slices.automation.handlers import default_handlers

URL = "postgresql://x@127.0.0.1:1/x"


def test_daily_retry_types_parse_names_and_refuse_unknown_ones() -> None:
    assert parse_automation_types("") == frozenset()
    assert parse_automation_types(" ReportSubscription , Reminder ") == frozenset(
        {AutomationType.REPORT_SUBSCRIPTION, AutomationType.REMINDER}
    )
    with pytest.raises(ValueError, match="unknown AutomationType Reports"):
        parse_automation_types("Reports")


def test_a_bad_daily_retry_setting_stops_startup_naming_it() -> None:
    settings = Settings(database_url=URL, automation_daily_retry_types="Reminder,Nope")
    with pytest.raises(ConfigError, match="AUTOMATION_DAILY_RETRY_TYPES: unknown AutomationType"):
        AutomationConfig.from_settings(settings)


def test_only_the_approved_types_handlers_retry_daily() -> None:
    config = AutomationConfig.from_settings(
        Settings(database_url=URL, automation_daily_retry_types="ReportSubscription")
    )
    handlers = default_handlers(daily_retry=config.daily_retry_types)
    report = handlers.get("ReportSubscription")
    reminder = handlers.get("Reminder")
    assert report is not None and reminder is not None
    assert (report.daily_retry, reminder.daily_retry) == (True, False)
    default = AutomationConfig.from_settings(Settings(database_url=URL))
    assert not any(
        h is not None and h.daily_retry
        for h in map(
            default_handlers(daily_retry=default.daily_retry_types).get,
            ("Reminder", "ReportSubscription"),
        )
    )


def test_the_interruption_allowance_and_delay_come_from_the_settings() -> None:
    config = AutomationConfig.from_settings(
        Settings(
            database_url=URL,
            automation_interruption_allowance=2,
            automation_interruption_delay_seconds=3,
        )
    )
    assert (config.interruption_allowance, config.interruption_delay) == (2, timedelta(seconds=3))
    with pytest.raises(ValueError, match="automation_interruption_allowance"):
        Settings(database_url=URL, automation_interruption_allowance=-1)
