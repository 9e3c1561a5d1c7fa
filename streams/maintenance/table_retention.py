"""Retention of the tables that would otherwise only grow: calendar events past their start
(with their reminders, leaving Version tombstones), old tombstones (raising the prune
horizon), and finished automation.scheduler rows. One cluster-once job, bounded batches."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from db import events as events_repo
from db import scheduler as scheduler_repo
from db.connector import Pool, connection
from streams import logs
from streams.clock import Clock, SystemClock
from streams.maintenance.drain import Drained, drain
from streams.maintenance.metrics import RetentionMetrics
from streams.settings import Settings
from streams.timers.context import RunContext

log = logging.getLogger(__name__)

EVENTS = "calendar.events"
REMINDERS = "calendar.event_reminders"
TOMBSTONES = "calendar.event_tombstones"
SCHEDULER = "automation.scheduler"
TABLES = (EVENTS, REMINDERS, TOMBSTONES, SCHEDULER)


@dataclass(frozen=True, slots=True)
class TableRetentionConfig:
    events: timedelta = timedelta(days=30)
    """An event this long past its start, with no Pending reminder, is deleted with its
    reminders (every reminder is due before the start; Sent and Skipped are history)."""
    tombstones: timedelta = timedelta(days=400)
    """A pruned event's Version tombstone is kept this long after the prune."""
    scheduler: timedelta = timedelta(days=30)
    """Finished scheduler rows this long past their ScheduledOn and last change."""
    batch_size: int = 5_000
    budget: timedelta = timedelta(minutes=4)
    """For the whole run (every table in turn); a table reached with nothing left still
    gets one batch."""

    def __post_init__(self) -> None:
        if self.events < timedelta(days=1):
            raise ValueError("TableRetentionConfig.events must be at least a day")
        if self.tombstones <= self.events:
            raise ValueError(
                "TableRetentionConfig.tombstones must exceed events "
                "(CALENDAR_TOMBSTONE_RETENTION_DAYS > CALENDAR_EVENT_RETENTION_DAYS)"
            )
        if self.scheduler < timedelta(days=2):
            # Keys are ensured from today (the BU's zone) on; two days cover every zone.
            raise ValueError("TableRetentionConfig.scheduler must be at least two days")
        if self.batch_size < 1:
            raise ValueError("TableRetentionConfig.batch_size must be >= 1")
        if self.budget <= timedelta(0):
            raise ValueError("TableRetentionConfig.budget must be positive")

    @classmethod
    def from_settings(cls, settings: Settings) -> TableRetentionConfig:
        return cls(
            events=timedelta(days=settings.calendar_event_retention_days),
            tombstones=timedelta(days=settings.calendar_tombstone_retention_days),
            scheduler=timedelta(days=settings.automation_scheduler_retention_days),
            batch_size=settings.retention_batch_size,
            budget=timedelta(seconds=settings.retention_budget_seconds),
        )

    def horizons(self) -> dict[str, str]:
        """What /status shows as each table's horizon."""
        return {
            EVENTS: f"start older than {self.events.days} d, no Pending reminder",
            REMINDERS: f"with their event ({self.events.days} d past its start)",
            TOMBSTONES: f"{self.tombstones.days} d after the prune",
            SCHEDULER: (
                "Completed (dated triggers; their record stays in scheduler_history), "
                "Deactivated, Cancelled by the system; scheduled and changed "
                f"over {self.scheduler.days} d ago"
            ),
        }


@dataclass(frozen=True)
class TableRetentionResult:
    as_of: datetime
    deleted: dict[str, int] = field(default_factory=dict)
    more: dict[str, bool] = field(default_factory=dict)
    rows_per_second: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "deleted": self.deleted,
            "more": [t for t, m in self.more.items() if m],
            "rows_per_second": {t: round(r) for t, r in self.rows_per_second.items()},
        }


class TableRetention:
    """A timer job: ``run_once(ctx)`` drains every table to its horizon at ``as_of``."""

    def __init__(
        self,
        pool: Pool,
        *,
        metrics: RetentionMetrics,
        config: TableRetentionConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config or TableRetentionConfig()
        self._pool = pool
        self._metrics = metrics
        self._clock: Clock = clock or SystemClock()

    async def run_once(self, ctx: RunContext) -> TableRetentionResult:
        as_of = ctx.as_of
        if as_of.tzinfo is None:
            raise ValueError("as_of must be timezone-aware")
        c = self.config
        started = self._clock.monotonic()
        result = TableRetentionResult(as_of)
        reminders = 0

        async def events() -> int:
            nonlocal reminders
            async with connection(self._pool) as conn:
                pruned = await events_repo.prune(conn, as_of - c.events, c.batch_size, as_of)
            reminders += pruned.reminders
            return pruned.events

        async def tombstones() -> int:
            async with connection(self._pool) as conn:
                return await events_repo.tombstones_prune(conn, as_of - c.tombstones, c.batch_size)

        async def scheduler() -> int:
            async with connection(self._pool) as conn:
                return await scheduler_repo.prune(conn, as_of - c.scheduler, c.batch_size)

        steps: list[tuple[str, Callable[[], Awaitable[int]]]] = [
            (EVENTS, events),
            (TOMBSTONES, tombstones),
            (SCHEDULER, scheduler),
        ]
        for table, batch in steps:
            left = c.budget.total_seconds() - (self._clock.monotonic() - started)
            done = await drain(
                batch, size=c.batch_size, budget_seconds=max(left, 0.0), clock=self._clock
            )
            self._record(result, table, done, as_of)
            if table == EVENTS:
                # Deleted with their events, in the same batches.
                self._record(
                    result,
                    REMINDERS,
                    Drained(reminders, done.batches, done.more, done.seconds),
                    as_of,
                )
        # One field per table (``deleted.<table>``: a number), and the tables with more to go.
        logs.event(
            log,
            logging.INFO,
            "table_retention",
            as_of=as_of,
            **{f"deleted.{t}": n for t, n in result.deleted.items()},
            more=",".join(t for t in result.deleted if result.more.get(t)) or None,
        )
        return result

    def _record(
        self, result: TableRetentionResult, table: str, done: Drained, as_of: datetime
    ) -> None:
        self._metrics.record(table, done, as_of)
        result.deleted[table] = done.rows
        result.more[table] = done.more
        result.rows_per_second[table] = done.rows_per_second
