"""The calendar slice's settings: the dispatch's poison-row backoff (environment variable =
field name in upper case). Read through ``Settings.of(CalendarSettings)``."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class CalendarSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore")

    # Calendar dispatch (seed 000): a poison row stays Pending and is retried after this,
    # doubling per failed attempt up to the max (DispatchConfig validates the pair).
    calendar_dispatch_poison_backoff_seconds: float = Field(60.0, ge=1, le=86_400)
    calendar_dispatch_poison_backoff_max_seconds: float = Field(3600.0, ge=1, le=86_400)
