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


KeyRange = tuple[str, str]
"""[first, past): the SchedulerKeys that start with a prefix, in byte order (collation "C")."""


async def page(
    db: Executor, status: str, bound: Bound, before: datetime, limit: int
) -> list[dict[str, Any]]:
    """Rows of ``status`` in page order."""
    rows = await db.fetch(sql("scheduler_console_page"), *bound, before, limit, status)
    return [dict(r) for r in rows]


async def page_by_key_prefix(
    db: Executor, status: str, bound: Bound, before: datetime, limit: int, key_range: KeyRange
) -> list[dict[str, Any]]:
    """Rows of ``status`` whose key is in ``key_range``."""
    rows = await db.fetch(
        sql("scheduler_console_page_by_key_prefix"), *bound, before, limit, status, *key_range
    )
    return [dict(r) for r in rows]


async def page_by_business_unit(
    db: Executor,
    status: str,
    bound: Bound,
    before: datetime,
    limit: int,
    business_unit: Any,
    key_range: KeyRange | None = None,
) -> list[dict[str, Any]]:
    """Rows of ``status`` of one business unit (and a key range, if given)."""
    first, past = key_range or (None, None)
    rows = await db.fetch(
        sql("scheduler_console_page_by_business_unit"),
        *bound,
        before,
        limit,
        status,
        business_unit,
        first,
        past,
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
