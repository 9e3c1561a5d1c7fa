"""Wire-format test messages (PascalCase JSON, as other teams' producers send them)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from streams.contracts.calendar import CalendarEventChanged

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def calendar_event(**overrides: Any) -> dict[str, Any]:
    """A valid pin.calendar.events.v1 payload; override any PascalCase field."""
    start = overrides.pop("StartAt", T0 + timedelta(hours=2))
    occurred = overrides.pop("OccurredAt", T0)
    msg: dict[str, Any] = {
        "ContractVersion": 1,
        "EventId": str(uuid.uuid4()),
        "TenantId": str(uuid.uuid4()),
        "OwnerUserId": str(uuid.uuid4()),
        "ClientUserId": None,
        "Kind": "Meeting",
        "StartAt": start.isoformat() if isinstance(start, datetime) else start,
        "TimeZone": "Europe/Moscow",
        "Status": "Planned",
        "ReminderOffsetsMinutes": [60, 15],
        "AppointmentId": None,
        "Version": 1,
        "OccurredAt": occurred.isoformat() if isinstance(occurred, datetime) else occurred,
    }
    msg.update(overrides)
    return msg


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg).encode()


def parsed(msg: dict[str, Any]) -> CalendarEventChanged:
    return CalendarEventChanged.model_validate(msg)
