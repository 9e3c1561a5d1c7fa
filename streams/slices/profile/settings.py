"""The profile slice's settings: the document expiry run's thresholds, batches and fan-out,
and the per-owner claim and event sizes (environment variable = field name in upper case).
Read through ``Settings.of(DocumentExpirySettings)``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from streams.domain.profile import parse_thresholds


class DocumentExpirySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore")

    # Document expiry reminders (seed 001). The schedule's own knobs (cron, max duration,
    # enabled, ...) are the registry's TIMER_DOCUMENT_EXPIRY_* overrides.
    # Days before ExpiresAt: "30,7,1,0" or "[30, 7, 1, 0]"; stored distinct and descending.
    timer_document_expiry_thresholds_days: str = "30,7,1,0"
    # Documents per scan batch (the run repeats while a batch is full).
    timer_document_expiry_batch_size: int = Field(500, ge=1, le=10_000)
    # kafka: one work item per owner on an internal topic, done by the worker that owns the
    # owner's partition (and its marks cache); inline: the run does every owner itself.
    timer_document_expiry_fanout: Literal["kafka", "inline"] = "kafka"
    # Documents one DocumentExpiryReminderEvent lists at most: an owner's reminders of one
    # run are split into events of up to this many (same correlation-id). 1,000 items are
    # about 154 KB (at most ~260 KB with 64-character masks): well under Kafka's 1 MiB; at
    # most the contract's MAX_DOCUMENTS_PER_EVENT (streams/contracts/profile.py).
    document_expiry_max_documents_per_event: int = Field(1000, ge=1, le=1800)
    # Documents one claim statement (and its transaction) covers at most: an owner with more
    # is claimed in chunks, each continued by a work item of its own.
    document_expiry_claim_chunk_documents: int = Field(5000, ge=10, le=50_000)

    @field_validator("timer_document_expiry_thresholds_days")
    @classmethod
    def _thresholds(cls, v: str) -> str:
        return ",".join(str(t) for t in parse_thresholds(v))

    @property
    def thresholds(self) -> tuple[int, ...]:
        return parse_thresholds(self.timer_document_expiry_thresholds_days)
