"""Bounded reconciliation (seed 003): a low-frequency registry job that repairs rows the
event path missed, through the same planner and key builders (so it can only repair, never
create a different key). No full-domain or unbounded scan.

Each input a reminder or report depends on declares its own bounded repair path
(``REPAIR_PATHS``): a source filter, a changed-since watermark with a keyset cursor, the BU
allowlist, ``batch_size`` per transaction and at most ``max_batches`` per run, and the
planner entry its event path uses (the same key helper):

- ``SourceChanges``: active sources changed after the watermark (UpdatedOn, SourceType,
  SourceGuid) → ``Planner.for_sources``;
- ``SettingChanges``: active reminder settings changed after the watermark (UpdatedOn,
  SettingGuid) → ``Planner.for_settings`` (a missed offset/date/threshold/send-time change);
- ``UnitChanges``: business units changed after the watermark (UpdatedOn, BusinessUnitId) →
  ``Planner.for_units`` (a missed time-zone change moves every schedule of the BU);
- ``ScheduledRuns`` (report subscriptions): active subscriptions in guid order; the cursor
  wraps at the end (periods roll with time, so there is no changed-since watermark — the
  report window is the bound).

A changed-since batch takes entities at least ``settle`` old and ensures only rows due within
today..today+``window_days``; its watermark is written in the batch's transaction: an
interrupted batch leaves it where it was, and the rerun converges to the same rows.

An empty allowlist reconciles nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

from db import business_units as units_repo
from db import reconcile_watermarks as watermarks_repo
from db import reminder_settings as settings_repo
from db import report_subscriptions as subscriptions_repo
from db import sources as sources_repo
from db.connector import Connection, transaction
from db.reconcile_watermarks import Changed, Watermark
from streams import logs
from streams.runtime import Runtime
from streams.settings import ConfigError
from streams.slices.automation.planner import Planned, Planner, ref
from streams.timers.context import RunContext

log = logging.getLogger("streams.slices.automation.reconcile")

SOURCES_PROVIDER = "SourceChanges"
SETTINGS_PROVIDER = "SettingChanges"
UNITS_PROVIDER = "UnitChanges"
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
    settings: int = 0
    units: int = 0
    subscriptions: int = 0
    batches: int = 0
    ensured: int = 0
    deactivated: int = 0

    def summary(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Page:
    """One changed-since batch: what to plan, the BUs to lock and the keyset position of its
    last entity (the next watermark)."""

    count: int
    units: set[UUID]
    last: Watermark
    plan: Callable[[Planner, Any, datetime, datetime], Awaitable[Planned]]


class RepairPath(Protocol):
    """A provider's bounded, changed-since repair path."""

    provider: str
    counter: str  # the ReconcileResult field its entities are counted in

    async def page(
        self, conn: Connection, units: Sequence[UUID], mark: Watermark, until: datetime, limit: int
    ) -> Page | None: ...


class SourcePath:
    provider, counter = SOURCES_PROVIDER, "sources"

    async def page(
        self, conn: Connection, units: Sequence[UUID], mark: Watermark, until: datetime, limit: int
    ) -> Page | None:
        rows = await sources_repo.reconcile_page(conn, units, mark, until, limit)
        if not rows:
            return None
        refs = [ref(c.source) for c in rows]
        last = rows[-1]
        return Page(
            len(rows),
            {c.source.business_unit_id for c in rows},
            Watermark(self.provider, last.updated_on, *ref(last.source)),
            lambda planner, conn, as_of, horizon: planner.for_sources(conn, refs, as_of, horizon),
        )


class SettingPath:
    provider, counter = SETTINGS_PROVIDER, "settings"

    async def page(
        self, conn: Connection, units: Sequence[UUID], mark: Watermark, until: datetime, limit: int
    ) -> Page | None:
        rows = await settings_repo.reconcile_page(conn, units, mark, until, limit)
        return _changed_page(self.provider, rows, lambda planner: planner.for_settings)


class UnitPath:
    provider, counter = UNITS_PROVIDER, "units"

    async def page(
        self, conn: Connection, units: Sequence[UUID], mark: Watermark, until: datetime, limit: int
    ) -> Page | None:
        rows = await units_repo.reconcile_page(conn, units, mark, until, limit)
        return _changed_page(self.provider, rows, lambda planner: planner.for_units)


# A planner entry of the event path: (conn, guids, as_of, horizon) → Planned.
Entry = Callable[[Any, Sequence[UUID], datetime, datetime], Awaitable[Planned]]


def _changed_page(
    provider: str, rows: Sequence[Changed], entry: Callable[[Planner], Entry]
) -> Page | None:
    if not rows:
        return None
    guids = [r.guid for r in rows]
    last = rows[-1]

    def plan(
        planner: Planner, conn: Connection, as_of: datetime, horizon: datetime
    ) -> Awaitable[Planned]:
        return entry(planner)(conn, guids, as_of, horizon)

    return Page(
        len(rows),
        {r.business_unit_id for r in rows},
        Watermark(provider, last.updated_on, "", last.guid),
        plan,
    )


REPAIR_PATHS: dict[str, RepairPath] = {
    p.provider: p for p in (SourcePath(), SettingPath(), UnitPath())
}
PROVIDERS = (SOURCES_PROVIDER, SETTINGS_PROVIDER, UNITS_PROVIDER, REPORTS_PROVIDER)


class Reconciliation:
    """``run_once(ctx)``: one bounded pass for each of ``providers`` (the worker registers
    one job per provider; tests may run both at once)."""

    def __init__(
        self,
        runtime: Runtime,
        planner: Planner,
        config: ReconcileConfig,
        *,
        providers: tuple[str, ...] = PROVIDERS,
        on_planned: Callable[[Planned], None] | None = None,
    ) -> None:
        unknown = set(providers) - set(PROVIDERS)
        if unknown:
            raise ValueError(f"unknown reconciliation providers: {sorted(unknown)}")
        self.runtime = runtime
        self.planner = planner
        self.config = config
        self.providers = providers
        self.on_planned = on_planned

    async def run_once(self, ctx: RunContext) -> ReconcileResult:
        result = ReconcileResult(run_id=ctx.run_id)
        for provider in self.providers if self.config.units else ():
            path = REPAIR_PATHS.get(provider)
            if path is not None:
                await self._changed_since(path, ctx, result)
            else:
                await self._reports(ctx, result)
        logs.event(
            log,
            logging.INFO,
            "automation_reconcile",
            run_id=result.run_id,
            providers=",".join(self.providers),
            sources=result.sources,
            settings=result.settings,
            units=result.units,
            subscriptions=result.subscriptions,
            batches=result.batches,
            ensured=result.ensured,
            deactivated=result.deactivated,
        )
        return result

    def _count(self, planned: Planned, result: ReconcileResult) -> None:
        result.batches += 1
        result.ensured += len(planned.ensured)
        result.deactivated += planned.deactivated
        if self.on_planned is not None:
            self.on_planned(planned)

    async def _changed_since(
        self, path: RepairPath, ctx: RunContext, result: ReconcileResult
    ) -> None:
        # At most max_batches per provider: the bound is the batch count, not the clock.
        cfg, as_of = self.config, ctx.as_of
        horizon = as_of + timedelta(days=cfg.window_days)
        pool = await self.runtime.pool()
        for _ in range(cfg.max_batches):
            if ctx.should_stop():
                return
            async with transaction(pool) as conn:
                mark = await watermarks_repo.get(conn, path.provider) or Watermark(
                    path.provider, EPOCH
                )
                page = await path.page(conn, cfg.units, mark, as_of - cfg.settle, cfg.batch_size)
                if page is None:
                    return
                await units_repo.lock(conn, page.units)
                planned = await page.plan(self.planner, conn, as_of, horizon)
                await watermarks_repo.put(conn, page.last, as_of)
            setattr(result, path.counter, getattr(result, path.counter) + page.count)
            self._count(planned, result)
            if page.count < cfg.batch_size:
                return

    async def _reports(self, ctx: RunContext, result: ReconcileResult) -> None:
        cfg, as_of = self.config, ctx.as_of
        pool = await self.runtime.pool()
        for _ in range(cfg.max_batches):
            if ctx.should_stop():
                return
            async with transaction(pool) as conn:
                mark = await watermarks_repo.get(conn, REPORTS_PROVIDER)
                cursor = mark.cursor_guid if mark is not None else None
                page = await subscriptions_repo.reconcile_page(
                    conn, cfg.units, cursor, cfg.batch_size
                )
                await units_repo.lock(conn, {s.business_unit_id for s in page})
                planned = await self.planner.for_subscriptions(conn, page, as_of)
                done = len(page) < cfg.batch_size
                next_cursor = None if done else page[-1].subscription_guid
                await watermarks_repo.put(
                    conn, Watermark(REPORTS_PROVIDER, as_of, "", next_cursor), as_of
                )
            result.subscriptions += len(page)
            if page:
                self._count(planned, result)
            if done:
                return
