"""Automation repository for ``automation.scheduler``: one function per statement in
``db/queries/automation.sql`` (the projections revalidation reads are in ``automation_inputs``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import date, datetime
from typing import Any
from uuid import UUID

import asyncpg

from db.queries import sql
from streams.domain.automation import SchedulerCandidate, unique_by_key

# A batch racing a concurrent insert of the same new key is run again for those keys.
_MAX_RACE_RETRIES = 5


@dataclass(frozen=True, slots=True)
class EnsuredRow:
    scheduler_id: int
    scheduler_key: str
    outcome: str
    status: str
    version: int
    retry_count: int
    is_on_support_hold: bool
    dispatch_result: dict[str, Any] | None


async def rows_ensure(
    conn: asyncpg.Connection, candidates: Sequence[SchedulerCandidate], now: datetime
) -> list[EnsuredRow]:
    """Ensure every candidate's row (one statement per batch); results in key order."""
    pending = unique_by_key(list(candidates))
    out: dict[str, EnsuredRow] = {}
    for _ in range(_MAX_RACE_RETRIES):
        if not pending:
            break
        rows = await conn.fetch(
            sql("automation_rows_ensure"),
            [c.key for c in pending],
            [c.automation_type.value for c in pending],
            [c.trigger_type.value for c in pending],
            [c.scheduled_on for c in pending],
            [c.scheduled_local_date for c in pending],
            [c.time_zone_id for c in pending],
            [c.input_hash for c in pending],
            [c.setting_guid for c in pending],
            [c.source_type for c in pending],
            [c.source_guid for c in pending],
            [c.subscription_guid for c in pending],
            now,
        )
        raced = {r["scheduler_key"] for r in rows if r["outcome"] == "Raced"}
        for r in rows:
            if r["outcome"] != "Raced":
                out[r["scheduler_key"]] = EnsuredRow(
                    r["scheduler_id"],
                    r["scheduler_key"],
                    r["outcome"],
                    r["status_id"],
                    r["version"],
                    r["retry_count"],
                    r["is_on_support_hold"],
                    r["dispatch_result_json"],
                )
        pending = [c for c in pending if c.key in raced]
    if pending:
        raise RuntimeError(f"Ensure kept racing on {len(pending)} keys")
    return [out[k] for k in sorted(out)]


@dataclass(frozen=True, slots=True)
class DeactivatedRow:
    scheduler_key: str
    status: str | None  # None: no such row
    version: int | None
    changed: bool


async def rows_deactivate(
    conn: asyncpg.Connection, reasons: Mapping[str, str], status: str, now: datetime
) -> list[DeactivatedRow]:
    """Pending/Failed rows of ``reasons`` (key → ReasonCode) → ``status``; one statement."""
    if not reasons:
        return []
    keys = sorted(reasons)
    rows = await conn.fetch(
        sql("automation_rows_deactivate"), keys, [reasons[k] for k in keys], status, now
    )
    return [
        DeactivatedRow(r["scheduler_key"], r["status_id"], r["version"], r["changed"]) for r in rows
    ]


@dataclass(frozen=True, slots=True)
class ClaimedRow:
    """A row this claim holds: ``token`` (its new Version) fences every later write."""

    scheduler_id: int
    scheduler_key: str
    automation_type: str
    trigger_type: str
    scheduled_on: datetime
    scheduled_local_date: date | None
    time_zone_id: str | None
    input_hash: str
    setting_guid: UUID | None
    source_type: str | None
    source_guid: UUID | None
    subscription_guid: UUID | None
    retry_count: int
    due_on: datetime
    lease_expires_on: datetime
    token: int
    interrupted_count: int = 0


_CLAIM_COLUMNS = (
    "scheduler_id",
    "scheduler_key",
    "automation_type_id",
    "trigger_type_id",
    "scheduled_on",
    "scheduled_local_date",
    "time_zone_id",
    "input_hash",
    "setting_guid",
    "source_type",
    "source_guid",
    "subscription_guid",
    "retry_count",
    "due_on",
    "processing_lease_expires_on",
    "version",
    "interrupted_count",
)


async def rows_claim(
    conn: asyncpg.Connection, now: datetime, batch_size: int, lease_seconds: float
) -> list[ClaimedRow]:
    rows = await conn.fetch(sql("automation_rows_claim"), now, batch_size, lease_seconds)
    claimed = [ClaimedRow(*(r[c] for c in _CLAIM_COLUMNS)) for r in rows]
    claimed.sort(key=lambda c: (c.due_on, c.scheduler_id))
    return claimed


async def rows_complete(
    conn: asyncpg.Connection,
    completions: Sequence[tuple[int, int, Mapping[str, Any]]],
    now: datetime,
) -> set[int]:
    """(id, token, DispatchResultJson) → Completed where the token still holds; returns the
    ids written (the others were fenced)."""
    if not completions:
        return set()
    rows = await conn.fetch(
        sql("automation_rows_complete"),
        [c[0] for c in completions],
        [c[1] for c in completions],
        [json.dumps(c[2], separators=(",", ":")) for c in completions],
        now,
    )
    return {r["scheduler_id"] for r in rows}


async def rows_retire(
    conn: asyncpg.Connection, retirements: Sequence[tuple[int, int, str]], now: datetime
) -> set[int]:
    """(id, token, ReasonCode) → Deactivated where the token still holds; returns ids written."""
    if not retirements:
        return set()
    rows = await conn.fetch(
        sql("automation_rows_retire"),
        [r[0] for r in retirements],
        [r[1] for r in retirements],
        [r[2] for r in retirements],
        now,
    )
    return {r["scheduler_id"] for r in rows}


@dataclass(frozen=True, slots=True)
class RetryWrite:
    """Where a claimed row goes back to (planned by the backoff ladder, the interruption
    allowance or a hold). ``interrupted_count`` is set only for an interrupted claim."""

    scheduler_id: int
    token: int
    status: str
    retry_count: int
    next_retry_on: datetime | None
    hold: bool
    reason: str | None
    error: str | None = None
    conflict_hash: str | None = None
    interrupted_count: int | None = None


async def rows_retry(
    conn: asyncpg.Connection, writes: Sequence[RetryWrite], now: datetime
) -> set[int]:
    if not writes:
        return set()
    columns = [[getattr(w, f.name) for w in writes] for f in fields(RetryWrite)]
    rows = await conn.fetch(sql("automation_rows_retry"), *columns, now)
    return {r["scheduler_id"] for r in rows}


@dataclass(frozen=True, slots=True)
class StaleRow:
    scheduler_id: int
    scheduler_key: str
    automation_type: str
    retry_count: int
    interrupted_count: int
    token: int


async def stale_lock(conn: asyncpg.Connection, now: datetime, batch_size: int) -> list[StaleRow]:
    rows = await conn.fetch(sql("automation_stale_lock"), now, batch_size)
    return [
        StaleRow(
            r["scheduler_id"],
            r["scheduler_key"],
            r["automation_type_id"],
            r["retry_count"],
            r["interrupted_count"],
            r["version"],
        )
        for r in rows
    ]


@dataclass(frozen=True, slots=True)
class BacklogStats:
    due_backlog: int
    earliest_due_on: datetime | None
    on_hold: int
    processing: int


async def backlog_stats(conn: asyncpg.Connection, now: datetime) -> BacklogStats:
    r = await conn.fetchrow(sql("automation_backlog_stats"), now)
    assert r is not None
    return BacklogStats(r["due_backlog"], r["earliest_due_on"], r["on_hold"], r["processing"])


@dataclass(frozen=True, slots=True)
class SchedulerRow:
    """A row as support sees it (no input beyond identifiers and hashes)."""

    scheduler_id: int
    scheduler_key: str
    automation_type_id: str
    trigger_type_id: str
    status_id: str
    status_reason_code: str | None
    failure_reason_code: str | None
    last_error: str | None
    retry_count: int
    next_retry_on: datetime | None
    scheduled_on: datetime
    input_hash: str
    conflict_input_hash: str | None
    is_on_support_hold: bool
    dispatch_result_json: dict[str, Any] | None
    support_action: str | None
    support_action_on: datetime | None
    support_action_count: int
    interrupted_count: int
    version: int
    updated_on: datetime


_ROW_COLUMNS = [f.name for f in fields(SchedulerRow)]


def _row(r: asyncpg.Record) -> SchedulerRow:
    return SchedulerRow(*(r[c] for c in _ROW_COLUMNS))


async def hold_list(conn: asyncpg.Connection, limit: int) -> list[SchedulerRow]:
    return [_row(r) for r in await conn.fetch(sql("automation_hold_list"), limit)]


async def row_get(conn: asyncpg.Connection, key: str) -> SchedulerRow | None:
    r = await conn.fetchrow(sql("automation_row_get"), key)
    return None if r is None else _row(r)


async def row_release(
    conn: asyncpg.Connection, key: str, action: str, reset_attempts: bool, now: datetime
) -> SchedulerRow | None:
    """Lift the hold of ``key``; None when there is no such row on hold."""
    r = await conn.fetchrow(sql("automation_row_release"), key, action, reset_attempts, now)
    return None if r is None else _row(r)
