"""Calendar contracts: event state in, ReminderDueEvent out (seed 000)."""

from __future__ import annotations

from enum import StrEnum
from uuid import UUID

from pydantic import Field, field_validator

from streams.contracts.base import MAX_VERSION, Contract, Instant, StateMessage, TimeZoneId


class EventStatus(StrEnum):
    PLANNED = "Planned"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    CANCELLED = "Cancelled"

    @property
    def is_open(self) -> bool:
        return self in (EventStatus.PLANNED, EventStatus.IN_PROGRESS)


class CalendarEventChanged(StateMessage):
    """pin.calendar.events.v1 — full state of a calendar event after a change."""

    event_id: UUID
    tenant_id: UUID
    owner_user_id: UUID
    client_user_id: UUID | None = None
    kind: str = Field(min_length=1, max_length=64)
    start_at: Instant
    time_zone: TimeZoneId
    status: EventStatus
    # Minutes before StartAt; 0 = at the start. Four weeks is the longest offset accepted.
    reminder_offsets_minutes: list[int] = Field(default_factory=list, max_length=32)
    appointment_id: UUID | None = None
    version: int = Field(ge=0, le=MAX_VERSION)
    occurred_at: Instant

    @field_validator("reminder_offsets_minutes")
    @classmethod
    def _offsets(cls, v: list[int]) -> list[int]:
        for minutes in v:
            if not 0 <= minutes <= 40_320:
                raise ValueError("each offset must be between 0 and 40320 minutes")
        return v


class ReminderDueEvent(Contract):
    """pin.calendar.reminder-due.v1 — one per Sent reminder; identifiers only, no PII."""

    reminder_id: UUID
    event_id: UUID
    tenant_id: UUID
    owner_user_id: UUID
    client_user_id: UUID | None = None
    kind: str = Field(min_length=1, max_length=64)
    start_at: Instant
    time_zone: TimeZoneId
    offset_minutes: int = Field(ge=0)
    appointment_id: UUID | None = None
