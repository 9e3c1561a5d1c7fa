"""Bounded reconciliation (seed 003): a low-frequency registry job that repairs rows the
event path missed, through the same planner and key builders (so it can only repair, never
create a different key). No full-domain or unbounded scan:

- reminders (``SourceChanges``): active sources only, of the BU allowlist, changed after the
  watermark (keyset position: UpdatedOn, SourceType, SourceGuid) and at least ``settle`` old,
  ``batch_size`` per transaction, at most ``max_batches`` per run; only rows due within
  today..today+``window_days`` are ensured. The watermark is written in the transaction of
  the batch it follows: an interrupted batch leaves it where it was, and the rerun converges
  to the same rows;
- report subscriptions (``ScheduledRuns``): active subscriptions of the BU allowlist in guid
  order, ``batch_size`` per transaction; the cursor wraps at the end (periods roll with time,
  so there is no changed-since watermark — the window is the bound).

An empty allowlist reconciles nothing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from db import automation_planning as repo
from db.connector import transaction
from streams.runtime import Runtime
from streams.settings import ConfigError
from streams.slices.automation.planning import Planned, Planner, ref

log = logging.getLogger("streams.slices.automation.reconcile")

SOURCES_PROVIDER = "SourceChanges"
REPORTS_PROVIDER = "ScheduledRuns"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ReconcileConfig:
    units: tuple[UUID, ...] = ()
    batch_size: int = 500
    max_batches: int = 20
    window_days: int = 30
    settle: timedelta = timedelta(minutes=1)

    @classmethod
    def parse_units(cls, text: str) -> tuple[UUID, ...]:
        try:
            return tuple(UUID(x.strip()) for x in text.split(",") if x.strip())
        except ValueError:
            raise ConfigError(
                "invalid configuration: setting AUTOMATION_RECONCILE_UNITS: "
                "a comma-separated list of BusinessUnit GUIDs"
            ) from None


@dataclass
class ReconcileResult:
    run_id: str
    sources: int = 0
    subscriptions: int = 0
    batches: int = 0
    ensured: int = 0
    deactivated: int = 0

    def summary(self) -> dict[str, Any]:
        return asdict(self)


PROVIDERS = (SOURCES_PROVIDER, REPORTS_PROVIDER)


class Reconciliation:
    """``run_once(as_of)``: one bounded pass for each of ``providers`` (the worker registers
    one job per provider; tests may run both at once)."""

    def __init__(
        self,
        runtime: Runtime,
        planner: Planner,
        config: ReconcileConfig,
        *,
        providers: tuple[str, ...] = PROVIDERS,
        on_planned: Callable[[Planned], None] | None = None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        unknown = set(providers) - set(PROVIDERS)
        if unknown:
            raise ValueError(f"unknown reconciliation providers: {sorted(unknown)}")
        self.runtime = runtime
        self.planner = planner
        self.config = config
        self.providers = providers
        self.on_planned = on_planned
        self.should_stop = should_stop

    async def run_once(self, as_of: datetime) -> ReconcileResult:
        result = ReconcileResult(run_id=uuid.uuid4().hex[:12])
        if self.config.units and SOURCES_PROVIDER in self.providers:
            await self._sources(as_of, result)
        if self.config.units and REPORTS_PROVIDER in self.providers:
            await self._reports(as_of, result)
        log.info(
            "action=automation_reconcile run_id=%s providers=%s sources=%d subscriptions=%d "
            "batches=%d ensured=%d deactivated=%d",
            result.run_id,
            ",".join(self.providers),
            result.sources,
            result.subscriptions,
            result.batches,
            result.ensured,
            result.deactivated,
        )
        return result

    def _count(self, planned: Planned, result: ReconcileResult) -> None:
        result.batches += 1
        result.ensured += len(planned.ensured)
        result.deactivated += planned.deactivated
        if self.on_planned is not None:
            self.on_planned(planned)

    async def _sources(self, as_of: datetime, result: ReconcileResult) -> None:
        cfg = self.config
        horizon = as_of + timedelta(days=cfg.window_days)
        pool = await self.runtime.pool()
        for _ in range(cfg.max_batches):
            if self.should_stop():
                return
            async with transaction(pool) as conn:
                mark = await repo.watermark_get(conn, SOURCES_PROVIDER) or repo.Watermark(
                    SOURCES_PROVIDER, EPOCH
                )
                page = await repo.reconcile_sources_page(
                    conn, cfg.units, mark, as_of - cfg.settle, cfg.batch_size
                )
                if not page:
                    return
                await repo.units_lock(conn, {c.source.business_unit_id for c in page})
                planned = await self.planner.for_sources(
                    conn, [ref(c.source) for c in page], as_of, horizon
                )
                last = page[-1]
                await repo.watermark_put(
                    conn,
                    repo.Watermark(
                        SOURCES_PROVIDER,
                        last.updated_on,
                        ref(last.source)[0],
                        last.source.source_guid,
                    ),
                    as_of,
                )
            result.sources += len(page)
            self._count(planned, result)
            if len(page) < cfg.batch_size:
                return

    async def _reports(self, as_of: datetime, result: ReconcileResult) -> None:
        cfg = self.config
        pool = await self.runtime.pool()
        for _ in range(cfg.max_batches):
            if self.should_stop():
                return
            async with transaction(pool) as conn:
                mark = await repo.watermark_get(conn, REPORTS_PROVIDER)
                cursor = mark.cursor_guid if mark is not None else None
                page = await repo.reconcile_subscriptions_page(
                    conn, cfg.units, cursor, cfg.batch_size
                )
                await repo.units_lock(conn, {s.business_unit_id for s in page})
                planned = await self.planner.for_subscriptions(conn, page, as_of)
                done = len(page) < cfg.batch_size
                next_cursor = None if done else page[-1].subscription_guid
                await repo.watermark_put(
                    conn, repo.Watermark(REPORTS_PROVIDER, as_of, "", next_cursor), as_of
                )
            result.subscriptions += len(page)
            if page:
                self._count(planned, result)
            if done:
                return
