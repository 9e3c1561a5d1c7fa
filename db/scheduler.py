"""Repository of ``automation.scheduler``: one function per statement in
``db/queries/scheduler.sql`` (``scheduler_<function>``)."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import date, datetime
from typing import Any
from uuid import UUID

import asyncpg

from db.connector import Connection
from db.outbox import OutboxRow
from db.queries import sql
from db.sources import SourceRef
from db.threshold_states import Triple
from streams.domain.automation.rules import SchedulerCandidate, unique_by_key

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


async def ensure(
    conn: Connection, candidates: Sequence[SchedulerCandidate], now: datetime
) -> list[EnsuredRow]:
    """Ensure every candidate's row (one statement per batch); results in key order."""
    pending = unique_by_key(list(candidates))
    out: dict[str, EnsuredRow] = {}
    for _ in range(_MAX_RACE_RETRIES):
        if not pending:
            break
        rows = await conn.fetch(
            sql("scheduler_ensure"),
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


async def deactivate(
    conn: Connection, reasons: Mapping[str, str], status: str, now: datetime
) -> list[DeactivatedRow]:
    """Pending/Failed rows of ``reasons`` (key → ReasonCode) → ``status``; one statement."""
    if not reasons:
        return []
    keys = sorted(reasons)
    rows = await conn.fetch(
        sql("scheduler_deactivate"), keys, [reasons[k] for k in keys], status, now
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


async def claim(
    conn: Connection, now: datetime, batch_size: int, lease_seconds: float
) -> list[ClaimedRow]:
    rows = await conn.fetch(sql("scheduler_claim"), now, batch_size, lease_seconds)
    claimed = [ClaimedRow(*(r[c] for c in _CLAIM_COLUMNS)) for r in rows]
    claimed.sort(key=lambda c: (c.due_on, c.scheduler_id))
    return claimed


async def complete_dispatch(
    conn: Connection,
    completions: Sequence[tuple[int, int, Mapping[str, Any]]],
    records: Mapping[int, OutboxRow],
    now: datetime,
) -> set[int]:
    """(id, token, DispatchResultJson) → Completed where the token still holds, and the
    outbox record of each row written (``records`` by scheduler id: topic, key, payload,
    headers JSON), in one statement; returns the ids written (the others were fenced and
    got no record)."""
    if not completions:
        return set()
    ids = list(records)
    rows = await conn.fetch(
        sql("scheduler_complete_dispatch"),
        [c[0] for c in completions],
        [c[1] for c in completions],
        [json.dumps(c[2], separators=(",", ":")) for c in completions],
        now,
        ids,
        *([records[i][k] for i in ids] for k in range(4)),
    )
    return {r["scheduler_id"] for r in rows}


async def retire(
    conn: Connection, retirements: Sequence[tuple[int, int, str]], now: datetime
) -> set[int]:
    """(id, token, ReasonCode) → Deactivated where the token still holds; returns ids written."""
    if not retirements:
        return set()
    rows = await conn.fetch(
        sql("scheduler_retire"),
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


async def retry(conn: Connection, writes: Sequence[RetryWrite], now: datetime) -> set[int]:
    if not writes:
        return set()
    columns = [[getattr(w, f.name) for w in writes] for f in fields(RetryWrite)]
    rows = await conn.fetch(sql("scheduler_retry"), *columns, now)
    return {r["scheduler_id"] for r in rows}


@dataclass(frozen=True, slots=True)
class StaleRow:
    scheduler_id: int
    scheduler_key: str
    automation_type: str
    retry_count: int
    interrupted_count: int
    token: int


async def lock_stale(conn: Connection, now: datetime, batch_size: int) -> list[StaleRow]:
    rows = await conn.fetch(sql("scheduler_lock_stale"), now, batch_size)
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


async def backlog_stats(conn: Connection, now: datetime) -> BacklogStats:
    r = await conn.fetchrow(sql("scheduler_backlog_stats"), now)
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


async def list_held(conn: Connection, limit: int) -> list[SchedulerRow]:
    return [_row(r) for r in await conn.fetch(sql("scheduler_list_held"), limit)]


async def get_by_key(conn: Connection, key: str) -> SchedulerRow | None:
    r = await conn.fetchrow(sql("scheduler_get_by_key"), key)
    return None if r is None else _row(r)


async def release(
    conn: Connection, key: str, action: str, reset_attempts: bool, now: datetime
) -> SchedulerRow | None:
    """Lift the hold of ``key``; None when there is no such row on hold."""
    r = await conn.fetchrow(sql("scheduler_release"), key, action, reset_attempts, now)
    return None if r is None else _row(r)


async def dispatched_of_thresholds(
    conn: Connection, triples: Collection[Triple]
) -> dict[Triple, frozenset[str]]:
    """The keys of each pair's dispatched ThresholdCondition rows (pairs without: absent)."""
    if not triples:
        return {}
    t = list(set(triples))
    rows = await conn.fetch(
        sql("scheduler_dispatched_of_thresholds"),
        [x[0] for x in t],
        [x[1] for x in t],
        [x[2] for x in t],
    )
    out: dict[Triple, set[str]] = {}
    for r in rows:
        out.setdefault((r["setting_guid"], r["source_type"], r["source_guid"]), set()).add(
            r["scheduler_key"]
        )
    return {k: frozenset(v) for k, v in out.items()}


@dataclass(frozen=True)
class OpenRow:
    scheduler_key: str
    setting_guid: UUID | None
    source_type: str | None
    source_guid: UUID | None


async def open_of_sources(conn: Connection, refs: Collection[SourceRef]) -> list[OpenRow]:
    if not refs:
        return []
    refs = list(set(refs))
    rows = await conn.fetch(
        sql("scheduler_open_of_sources"), [r[0] for r in refs], [r[1] for r in refs]
    )
    return [OpenRow(*r) for r in rows]


async def open_of_settings(conn: Connection, guids: Collection[UUID]) -> list[OpenRow]:
    if not guids:
        return []
    rows = await conn.fetch(sql("scheduler_open_of_settings"), list(set(guids)))
    return [OpenRow(*r) for r in rows]


async def open_of_setting_range(
    conn: Connection, guid: UUID, first: UUID, last: UUID
) -> list[OpenRow]:
    """Open rows of one setting whose SourceGuid is in [first, last]."""
    rows = await conn.fetch(sql("scheduler_open_of_setting_range"), guid, first, last)
    return [OpenRow(*r) for r in rows]


async def open_of_setting_unsourced(conn: Connection, guid: UUID) -> list[OpenRow]:
    rows = await conn.fetch(sql("scheduler_open_of_setting_unsourced"), guid)
    return [OpenRow(*r) for r in rows]


async def open_of_subscriptions(conn: Connection, guids: Collection[UUID]) -> dict[UUID, set[str]]:
    out: dict[UUID, set[str]] = {g: set() for g in guids}
    if guids:
        for r in await conn.fetch(sql("scheduler_open_of_subscriptions"), list(set(guids))):
            out[r["subscription_guid"]].add(r["scheduler_key"])
    return out


async def status_count(conn: Connection, sources: Collection[UUID]) -> dict[str, int]:
    rows = await conn.fetch(sql("scheduler_status_count"), list(sources))
    return {r["status_id"]: r["n"] for r in rows}


async def prune(conn: Connection, before: datetime, limit: int) -> int:
    return int(await conn.fetchval(sql("scheduler_prune"), before, limit))


async def history_get(conn: Connection, key: str) -> dict[str, Any] | None:
    """The record a pruned Completed row left (None: none)."""
    row = await conn.fetchrow(sql("scheduler_history_get"), key)
    return dict(row) if row is not None else None
