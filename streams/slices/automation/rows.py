"""Ensure and Deactivate: the API the automation inputs (agents, reconciliation, the CLI)
call on their own transaction to say which scheduler rows should exist."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from db import scheduler as repo
from db.connector import Connection
from db.scheduler import DeactivatedRow, EnsuredRow
from streams import logs
from streams.domain.automation.rules import EnsureOutcome, SchedulerCandidate, SchedulerStatus
from streams.slices.automation.metrics import AutomationMetrics

log = logging.getLogger("streams.slices.automation.rows")

# Outcomes after which the row is Pending with (possibly) a new ScheduledOn.
SCHEDULED = frozenset(
    {EnsureOutcome.INSERTED.value, EnsureOutcome.REACTIVATED.value, EnsureOutcome.UPDATED.value}
)


class SchedulerRows:
    """Ensure / Deactivate, one statement per batch, on the caller's transaction connection.

    Call ``deactivate`` for the rows that no longer hold first, then ``ensure`` for those
    that should exist (the seed's order), in one transaction; after the commit call
    ``wake_for(candidates, results)`` so a row due sooner than the next cycle runs on time.
    Metrics count what the statements did (a caller's rollback is not subtracted).
    """

    def __init__(
        self, metrics: AutomationMetrics, wake: Callable[[datetime], None] | None = None
    ) -> None:
        self.metrics = metrics
        self._wake = wake

    async def ensure(
        self, conn: Connection, candidates: Sequence[SchedulerCandidate], now: datetime
    ) -> list[EnsuredRow]:
        results = await repo.ensure(conn, candidates, now)
        for r in results:
            self.metrics.ensured.labels(r.outcome).inc()
            if r.outcome == EnsureOutcome.CONFLICT.value:
                # The row id only: a key can carry a source's date, which stays out of logs.
                logs.event(
                    log,
                    logging.WARNING,
                    "automation_ensure_conflict",
                    scheduler_id=r.scheduler_id,
                    status=r.status,
                    version=r.version,
                )
        return results

    async def deactivate(
        self, conn: Connection, reasons: Mapping[str, str], now: datetime
    ) -> list[DeactivatedRow]:
        """Pending/Failed rows → Deactivated with a ReasonCode per key; Completed rows are
        history and stay, a Processing row is left to its claim (execution revalidates)."""
        return self._count(
            await repo.deactivate(conn, reasons, SchedulerStatus.DEACTIVATED.value, now)
        )

    async def cancel(
        self, conn: Connection, reasons: Mapping[str, str], now: datetime
    ) -> list[DeactivatedRow]:
        """As ``deactivate``, to Cancelled (e.g. a manual run withdrawn by its requester)."""
        return self._count(
            await repo.deactivate(conn, reasons, SchedulerStatus.CANCELLED.value, now)
        )

    def _count(self, rows: list[DeactivatedRow]) -> list[DeactivatedRow]:
        for r in rows:
            result = "changed" if r.changed else ("missing" if r.status is None else "unchanged")
            self.metrics.deactivated_by_source.labels(result).inc()
        return rows

    def wake_for(
        self, candidates: Sequence[SchedulerCandidate], results: Sequence[EnsuredRow]
    ) -> datetime | None:
        """Ask the runner to wake at the earliest ScheduledOn among rows made Pending."""
        scheduled = {r.scheduler_key for r in results if r.outcome in SCHEDULED}
        times = [c.scheduled_on for c in candidates if c.key in scheduled]
        if not times:
            return None
        earliest = min(times)
        if self._wake is not None:
            self._wake(earliest)
        return earliest
