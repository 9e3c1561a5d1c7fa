"""The automation slice's settings: the scheduler's claims, leases, backoff and interruptions,
and its inputs' report window and bounded reconciliation (environment variable = field name
in upper case). Read through ``Settings.of(AutomationSettings)``; the ladder, the daily-retry
types and the reconcile units are parsed by ``AutomationConfig`` / ``ReconcileConfig``."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class AutomationSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore")

    # Automation scheduler (seed 003): rows per claim, how long a claim holds its rows, the
    # backoff ladder (seconds) before support hold, rows per stale-cleanup pass.
    automation_batch_size: int = Field(200, ge=1, le=10_000)
    automation_lease_seconds: float = Field(120.0, gt=0, le=86_400)
    automation_backoff_seconds: str = "300,900,3600"
    automation_stale_batch_size: int = Field(500, ge=1, le=10_000)
    # Claims ended without a verdict (DB error, cancelled run, expired lease) a row may have
    # before they count as attempts, and how soon an interrupted row is due again.
    automation_interruption_allowance: int = Field(5, ge=0, le=1_000)
    automation_interruption_delay_seconds: float = Field(15.0, ge=0, le=86_400)
    # AutomationTypes whose handlers are approved as long-running: once the ladder is spent
    # they retry daily instead of going on support hold (comma-separated, e.g.
    # "ReportSubscription"; empty = none).
    automation_daily_retry_types: str = ""
    # Automation inputs: how far ahead report runs are scheduled; bounded reconciliation's BU
    # allowlist (comma-separated GUIDs; empty = off), batch, due window and settle lag.
    automation_report_window_days: int = Field(7, ge=1, le=62)
    automation_reconcile_units: str = ""
    automation_reconcile_batch_size: int = Field(500, ge=1, le=10_000)
    automation_reconcile_window_days: int = Field(30, ge=1, le=366)
    automation_reconcile_settle_seconds: float = Field(60.0, ge=0, le=86_400)
    # A setting's (or its BU's) fan-out over the sources of its (BU, SourceType): sources per
    # transaction (the input's own and each of the drainer's, timer automation-fanout), and the
    # identical chunk failures in a row that park a fan-out.
    automation_fanout_chunk_sources: int = Field(1000, ge=1, le=100_000)
    automation_fanout_park_after: int = Field(5, ge=1, le=1_000)
