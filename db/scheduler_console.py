"""Repository of ``automation.scheduler`` as the operators' console reads it: one function per
statement in ``db/queries/scheduler_console.sql`` (pages by status, one row, counts)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from db.connector import Executor
from db.queries import sql

Bound = tuple[datetime, int]
"""The keyset bound (scheduled_on, scheduler_id): a page starts after it."""


async def page(
    db: Executor,
    status: str,
    bound: Bound,
    before: datetime,
    limit: int,
    key_prefix: str | None = None,
    business_unit: Any = None,
) -> list[dict[str, Any]]:
    rows = await db.fetch(
        sql("scheduler_console_page"), *bound, before, limit, status, key_prefix, business_unit
    )
    return [dict(r) for r in rows]


async def on_hold(
    db: Executor,
    bound: Bound,
    before: datetime,
    limit: int,
    key_prefix: str | None = None,
    business_unit: Any = None,
) -> list[dict[str, Any]]:
    """Rows on support hold, whatever their status."""
    rows = await db.fetch(
        sql("scheduler_console_on_hold"), *bound, before, limit, key_prefix, business_unit
    )
    return [dict(r) for r in rows]


async def get(db: Executor, scheduler_id: int) -> dict[str, Any] | None:
    row = await db.fetchrow(sql("scheduler_console_get"), scheduler_id)
    if row is None:
        return None
    out = dict(row)
    raw = out["dispatch_result_json"]
    out["dispatch_result_json"] = json.loads(raw) if raw is not None else None
    return out


async def counts(db: Executor, cap: int) -> dict[str, int]:
    """Rows by console state (each status, and OnHold), each counted up to ``cap``."""
    rows = await db.fetch(sql("scheduler_console_counts"), cap)
    return {str(r["state"]): int(r["n"]) for r in rows}
