"""Agent on pin.calendar.events.v1: keep the events projection and materialize reminder rows."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import faust
from faust.types import StreamT

from db import calendar as repo
from db.connector import transaction
from streams.agents.consumer import ContractConsumer, Decoded
from streams.contracts import CALENDAR_EVENTS
from streams.contracts.calendar import CalendarEventChanged
from streams.domain.calendar import fingerprint, insertable, unwanted_reason, wanted_reminders
from streams.runtime import Runtime
from streams.tables.cache import KeyCache
from streams.topics import Topics

log = logging.getLogger("streams.agents.calendar")


@dataclass
class ApplyResult:
    applied: int = 0
    stale: int = 0
    cache_skipped: int = 0
    reminders_pending: int = 0
    reminders_skipped: int = 0
    earliest_due: datetime | None = None
    applied_ids: set[str] = field(default_factory=set)
    # Positions in the batch of the messages that changed state (the rest were no-ops).
    applied_positions: set[int] = field(default_factory=set)


class CalendarEventsApplier:
    """Applies a batch of event states in one transaction.

    The cache (EventId → last Version + fingerprint) only saves round trips: a message
    it calls stale or unchanged provably leads to no row change; anything else goes to
    PostgreSQL, whose Version check decides.
    """

    def __init__(
        self,
        runtime: Runtime,
        cache: KeyCache | None = None,
        on_due: Callable[[datetime], None] | None = None,
    ) -> None:
        self.runtime = runtime
        self.cache = cache
        self.on_due = on_due
        self.consumer: ContractConsumer[CalendarEventChanged] | None = None

    async def __call__(self, batch: Sequence[Decoded[CalendarEventChanged]]) -> ApplyResult:
        newest: dict[Any, Decoded[CalendarEventChanged]] = {}
        position: dict[int, int] = {}
        for i, d in enumerate(batch):
            position[id(d)] = i
            seen = newest.get(d.message.event_id)
            if seen is None or d.message.version > seen.message.version:
                newest[d.message.event_id] = d
        result = ApplyResult(stale=len(batch) - len(newest))
        todo: list[Decoded[CalendarEventChanged]] = []
        unchanged: list[Decoded[CalendarEventChanged]] = []
        for d in newest.values():
            cached = self.cache.get(str(d.message.event_id)) if self.cache else None
            if cached is not None and d.message.version <= cached["v"]:
                result.stale += 1
            elif cached is not None and cached["fp"] == fingerprint(d.message):
                unchanged.append(d)
            else:
                todo.append(d)
        if todo or unchanged:
            advanced = await self._write(
                [d.message for d in todo], [d.message for d in unchanged], result
            )
            for d in todo:
                if str(d.message.event_id) in result.applied_ids:
                    result.applied_positions.add(position[id(d)])
                    self._remember(d)
            # Same content, newer Version: no reminder changes, only the stored Version
            # moves; the cache follows the database, never leads it.
            for d in unchanged:
                if d.message.event_id in advanced:
                    result.cache_skipped += 1
                    self._remember(d)
                else:
                    result.stale += 1
        if result.earliest_due is not None and self.on_due is not None:
            self.on_due(result.earliest_due)
        return result

    async def _write(
        self,
        events: list[CalendarEventChanged],
        unchanged: list[CalendarEventChanged],
        result: ApplyResult,
    ) -> set[UUID]:
        """One transaction: new states with their reminders, and Version bumps of unchanged
        states. Returns the ids of the unchanged states whose stored Version moved."""
        now = self.runtime.clock.now()
        pool = await self.runtime.pool()
        async with transaction(pool) as conn:
            applied = await repo.upsert_events(conn, events, now)
            changed = [e for e in events if e.event_id in applied]
            wanted = {e.event_id: wanted_reminders(e) for e in changed}
            result.reminders_skipped = await repo.skip_unwanted_reminders(
                conn,
                {e.event_id: unwanted_reason(e.status) for e in changed},
                [slot.reminder_id for slots in wanted.values() for slot in slots],
                now,
            )
            new = [slot for e in changed for slot in insertable(wanted[e.event_id], e.occurred_at)]
            dues = await repo.ensure_reminders(conn, new, now)
            advanced = await repo.advance_versions(conn, unchanged, now)
        result.applied += len(applied)
        result.stale += len(events) - len(applied)
        result.reminders_pending += len(dues)
        result.applied_ids.update(str(i) for i in applied)
        if dues:
            result.earliest_due = min(dues)
        return advanced

    def _remember(self, d: Decoded[CalendarEventChanged]) -> None:
        if self.cache is not None:
            self.cache.put(
                d.event,
                str(d.message.event_id),
                {"v": d.message.version, "fp": fingerprint(d.message)},
            )


def register(
    app: faust.App,
    runtime: Runtime,
    topics: Topics,
    on_due: Callable[[datetime], None] | None = None,
) -> CalendarEventsApplier:
    table = app.Table(
        "calendar-event-cache",
        default=None,
        partitions=runtime.settings.topic_partitions,
        schema=faust.Schema(key_serializer="json", value_serializer="json"),
        help="EventId -> last applied Version and reminder fingerprint",
    )
    cache = KeyCache(table, runtime.metrics.agents)
    applier = CalendarEventsApplier(runtime, cache, on_due)
    consumer = ContractConsumer(
        CALENDAR_EVENTS, applier, topics.calendar_events_dlq, runtime.metrics.agents
    )

    # concurrency=1: one in-flight batch per partition, acked only after its commit.
    @app.agent(topics.calendar_events, name="calendar-events", concurrency=1)
    async def calendar_events(stream: StreamT[Any]) -> None:
        await consumer.run(stream)

    applier.consumer = consumer
    return applier
