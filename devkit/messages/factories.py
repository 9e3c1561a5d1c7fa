"""Wire-format test messages, built from the contract models (so they cannot drift from the
contract), as PascalCase dicts that a test may still bend into something invalid."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from streams.contracts.calendar import CalendarEventChanged, EventStatus, ReminderDueEvent

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _wire(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def calendar_event(**overrides: Any) -> dict[str, Any]:
    """A valid pin.calendar.events.v1 payload; override any PascalCase field (even with a
    value the contract refuses, to test the DLQ)."""
    start = overrides.pop("StartAt", T0 + timedelta(hours=2))
    occurred = overrides.pop("OccurredAt", T0)
    model = CalendarEventChanged(
        event_id=uuid.uuid4(),
        tenant_id=uuid.uuid4(),
        owner_user_id=uuid.uuid4(),
        kind="Meeting",
        start_at=T0 + timedelta(hours=2),
        time_zone="Europe/Moscow",
        status=EventStatus.PLANNED,
        reminder_offsets_minutes=[60, 15],
        version=1,
        occurred_at=T0,
    )
    msg: dict[str, Any] = json.loads(model.to_json())
    msg["StartAt"], msg["OccurredAt"] = _wire(start), _wire(occurred)
    msg.update({k: _wire(v) for k, v in overrides.items()})
    return msg


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg).encode()


def parsed(msg: dict[str, Any]) -> CalendarEventChanged:
    return CalendarEventChanged.model_validate(msg)


def reminder_due() -> ReminderDueEvent:
    return ReminderDueEvent(
        reminder_id=uuid.UUID("00000000-0000-0000-0000-000000000001"),
        event_id=uuid.UUID("00000000-0000-0000-0000-0000000000e1"),
        tenant_id=uuid.UUID("00000000-0000-0000-0000-0000000000a1"),
        owner_user_id=uuid.UUID("00000000-0000-0000-0000-0000000000b1"),
        kind="Consultation",
        start_at=datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
        time_zone="Europe/Berlin",
        offset_minutes=60,
    )
