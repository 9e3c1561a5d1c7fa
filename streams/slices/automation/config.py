"""Automation scheduler settings, validated once: a bad value stops startup naming the setting."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from streams.contracts.automation import AutomationType
from streams.domain.automation.rules import (
    DEFAULT_BACKOFF,
    DEFAULT_INTERRUPTION_ALLOWANCE,
    DEFAULT_INTERRUPTION_DELAY,
    parse_ladder,
)
from streams.settings import ConfigError, Settings
from streams.slices.automation.settings import AutomationSettings


@dataclass(frozen=True)
class AutomationConfig:
    """``batch_size`` rows per claim; a claim holds its rows for ``lease``; a failed or
    abandoned attempt waits the ``backoff`` ladder's next step, then goes on support hold. A
    claim that ends without a verdict is an interruption: due again after
    ``interruption_delay``, an attempt only once ``interruption_allowance`` is spent."""

    batch_size: int = 200
    lease: timedelta = timedelta(seconds=120)
    backoff: tuple[timedelta, ...] = DEFAULT_BACKOFF
    stale_batch_size: int = 500
    interruption_allowance: int = DEFAULT_INTERRUPTION_ALLOWANCE
    interruption_delay: timedelta = DEFAULT_INTERRUPTION_DELAY
    hold_view_limit: int = 100
    # AutomationTypes approved as long-running: they retry daily after the ladder.
    daily_retry_types: frozenset[AutomationType] = frozenset()

    @classmethod
    def from_settings(cls, core: Settings) -> AutomationConfig:
        settings = core.of(AutomationSettings)
        try:
            backoff = parse_ladder(settings.automation_backoff_seconds)
        except ValueError as exc:
            raise ConfigError(
                f"invalid configuration: setting AUTOMATION_BACKOFF_SECONDS: {exc}"
            ) from None
        try:
            daily = parse_automation_types(settings.automation_daily_retry_types)
        except ValueError as exc:
            raise ConfigError(
                f"invalid configuration: setting AUTOMATION_DAILY_RETRY_TYPES: {exc}"
            ) from None
        return cls(
            batch_size=settings.automation_batch_size,
            lease=timedelta(seconds=settings.automation_lease_seconds),
            backoff=backoff,
            stale_batch_size=settings.automation_stale_batch_size,
            interruption_allowance=settings.automation_interruption_allowance,
            interruption_delay=timedelta(seconds=settings.automation_interruption_delay_seconds),
            daily_retry_types=daily,
        )

    def check_lease(self, max_duration: timedelta, schedule_setting: str) -> None:
        """A live claimant must finish (or be cancelled at its max duration) before its lease
        expires, or cleanup would rescue rows that are still being worked on."""
        if self.lease <= max_duration:
            raise ConfigError(
                "invalid configuration: setting AUTOMATION_LEASE_SECONDS: "
                f"{self.lease.total_seconds():g} s must exceed the scheduler run's max duration "
                f"({max_duration.total_seconds():g} s, {schedule_setting})"
            )


def parse_automation_types(text: str) -> frozenset[AutomationType]:
    """``"ReportSubscription,Reminder"`` → the types; empty → none; ValueError on a name that
    is not an AutomationType."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = {t.value: t for t in AutomationType}
    unknown = sorted(n for n in names if n not in known)
    if unknown:
        raise ValueError(
            f"unknown AutomationType {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )
    return frozenset(known[n] for n in names)
