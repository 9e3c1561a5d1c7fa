"""Helpers for calendar integration tests: apply event states through the real applier."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from unittest.mock import MagicMock

import asyncpg

from devkit.messages.factories import T0, parsed
from streams.clock import ManualClock
from streams.input.applier import ApplyResult
from streams.input.consumer import Decoded
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.calendar.events import CalendarEventsApplier, CalendarWrite


def make_runtime(database_url: str, now: datetime = T0, **settings: Any) -> Runtime:
    return Runtime(Settings(database_url=database_url, **settings), clock=ManualClock(now))


async def apply(
    applier: CalendarEventsApplier, *messages: dict[str, Any]
) -> ApplyResult[CalendarWrite]:
    # The Kafka event is only needed by the cache (changelog partition); a stand-in does here.
    return await applier([Decoded(MagicMock(), parsed(m)) for m in messages])


async def reminders(
    pool: asyncpg.Pool, event_id: str
) -> list[tuple[int, datetime, str, str | None]]:
    rows = await pool.fetch(
        "SELECT offset_minutes, due_at, status, skip_reason FROM calendar.event_reminders "
        "WHERE event_id = $1::uuid ORDER BY due_at, offset_minutes",
        event_id,
    )
    return [(r["offset_minutes"], r["due_at"], r["status"], r["skip_reason"]) for r in rows]


async def outbox(pool: asyncpg.Pool) -> Sequence[asyncpg.Record]:
    return await pool.fetch("SELECT id, topic, key, payload, headers FROM ops.outbox ORDER BY id")
