"""Automation repository: one function per statement in ``db/queries/automation.sql``."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import date, datetime
from typing import Any
from uuid import UUID

import asyncpg

from db.queries import sql
from streams.contracts.automation import (
    Comparator,
    FiringPolicy,
    ReminderSettingChanged,
    ReportSubscriptionChanged,
    SourceEntityChanged,
    TriggerType,
)
from streams.domain.automation import SchedulerCandidate, norm_text, unique_by_key
from streams.domain.automation_revalidation import SettingState, SourceState, SubscriptionState

# A batch racing a concurrent insert of the same new key is run again for those keys.
_MAX_RACE_RETRIES = 5


@dataclass(frozen=True, slots=True)
class EnsuredRow:
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
    rows = await conn.fetch(
        sql("automation_rows_deactivate"), list(reasons), list(reasons.values()), status, now
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
    """Where a claimed row goes back to (planned by the backoff ladder or a hold)."""

    scheduler_id: int
    token: int
    status: str
    retry_count: int
    next_retry_on: datetime | None
    hold: bool
    reason: str | None
    error: str | None = None
    conflict_hash: str | None = None


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
    token: int


async def stale_lock(conn: asyncpg.Connection, now: datetime, batch_size: int) -> list[StaleRow]:
    rows = await conn.fetch(sql("automation_stale_lock"), now, batch_size)
    return [
        StaleRow(
            r["scheduler_id"],
            r["scheduler_key"],
            r["automation_type_id"],
            r["retry_count"],
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


async def settings_upsert(
    conn: asyncpg.Connection, settings: Sequence[ReminderSettingChanged], now: datetime
) -> set[UUID]:
    if not settings:
        return set()
    t = [s.threshold for s in settings]
    rows = await conn.fetch(
        sql("automation_settings_upsert"),
        [s.setting_guid for s in settings],
        [s.business_unit_id for s in settings],
        [s.source_type for s in settings],
        [s.trigger_type.value for s in settings],
        [s.trigger_key for s in settings],
        [",".join(str(d) for d in sorted(set(s.offsets_days))) for s in settings],
        [s.send_time_local for s in settings],
        [x.metric_key if x else None for x in t],
        [x.value if x else None for x in t],
        [x.comparator.value if x else None for x in t],
        [x.firing_policy.value if x else None for x in t],
        [s.active for s in settings],
        [s.version for s in settings],
        now,
    )
    return {r["setting_guid"] for r in rows}


async def sources_upsert(
    conn: asyncpg.Connection, sources: Sequence[SourceEntityChanged], now: datetime
) -> set[tuple[str, UUID]]:
    if not sources:
        return set()
    rows = await conn.fetch(
        sql("automation_sources_upsert"),
        # Normalized as in SchedulerKeys, so revalidation finds the source a row names.
        [norm_text(s.source_type) for s in sources],
        [s.source_guid for s in sources],
        [s.business_unit_id for s in sources],
        [s.is_active for s in sources],
        [json.dumps(s.attributes, sort_keys=True) for s in sources],
        [s.version for s in sources],
        [s.occurred_at for s in sources],
        now,
    )
    return {(r["source_type"], r["source_guid"]) for r in rows}


async def subscriptions_upsert(
    conn: asyncpg.Connection, subscriptions: Sequence[ReportSubscriptionChanged], now: datetime
) -> set[UUID]:
    if not subscriptions:
        return set()
    rows = await conn.fetch(
        sql("automation_subscriptions_upsert"),
        [s.subscription_guid for s in subscriptions],
        [s.business_unit_id for s in subscriptions],
        [s.cron for s in subscriptions],
        [s.period.value if s.period else None for s in subscriptions],
        [s.active for s in subscriptions],
        [s.version for s in subscriptions],
        now,
    )
    return {r["subscription_guid"] for r in rows}


async def settings_get(
    conn: asyncpg.Connection, guids: Collection[UUID]
) -> dict[UUID, SettingState]:
    if not guids:
        return {}
    rows = await conn.fetch(sql("automation_settings_get"), list(guids))
    return {
        r["setting_guid"]: SettingState(
            setting_guid=r["setting_guid"],
            source_type=r["source_type"],
            trigger_type=TriggerType(r["trigger_type"]),
            trigger_key=r["trigger_key"],
            offsets_days=tuple(r["offsets_days"]),
            active=r["active"],
            threshold_metric_key=r["threshold_metric_key"],
            threshold_value=r["threshold_value"],
            threshold_comparator=(
                Comparator(r["threshold_comparator"]) if r["threshold_comparator"] else None
            ),
            threshold_firing_policy=(
                FiringPolicy(r["threshold_firing_policy"]) if r["threshold_firing_policy"] else None
            ),
        )
        for r in rows
    }


async def sources_get(
    conn: asyncpg.Connection, refs: Collection[tuple[str, UUID]]
) -> dict[tuple[str, UUID], SourceState]:
    if not refs:
        return {}
    rows = await conn.fetch(
        sql("automation_sources_get"), [r[0] for r in refs], [r[1] for r in refs]
    )
    return {
        (r["source_type"], r["source_guid"]): SourceState(
            r["source_type"], r["source_guid"], r["is_active"], r["attributes"]
        )
        for r in rows
    }


async def subscriptions_get(
    conn: asyncpg.Connection, guids: Collection[UUID]
) -> dict[UUID, SubscriptionState]:
    if not guids:
        return {}
    rows = await conn.fetch(sql("automation_subscriptions_get"), list(guids))
    return {
        r["subscription_guid"]: SubscriptionState(r["subscription_guid"], r["active"]) for r in rows
    }
