"""Rows for the console's tests: calendar events and reminders in every state, scheduler rows,
document-expiry markers and runs, and outbox records (published, waiting, parked), written
straight into a migrated database."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
TENANT_A = uuid.UUID("aaaaaaaa-0000-4000-8000-000000000001")
TENANT_B = uuid.UUID("bbbbbbbb-0000-4000-8000-000000000002")
OWNER_A = uuid.UUID("aaaaaaaa-1111-4000-8000-000000000001")
OWNER_B = uuid.UUID("bbbbbbbb-1111-4000-8000-000000000002")
BU = uuid.UUID("cccccccc-0000-4000-8000-000000000003")
HASH = "0" * 64


@dataclass
class Seeded:
    reminders: dict[str, list[uuid.UUID]] = field(default_factory=dict)
    """State → reminder ids in (due_at, id) order."""
    events: dict[uuid.UUID, uuid.UUID] = field(default_factory=dict)
    """Reminder id → its event."""
    tenant_a: list[uuid.UUID] = field(default_factory=list)


async def event(conn: asyncpg.Connection, tenant: uuid.UUID, owner: uuid.UUID) -> uuid.UUID:
    event_id = uuid.uuid4()
    await conn.execute(
        "INSERT INTO calendar.events (event_id, tenant_id, owner_user_id, kind, start_at, "
        "time_zone, status, version, occurred_at) "
        "VALUES ($1, $2, $3, 'Appointment', $4, 'UTC', 'Planned', 1, $4)",
        event_id,
        tenant,
        owner,
        T0 + timedelta(days=2),
    )
    return event_id


async def reminder(
    conn: asyncpg.Connection,
    event_id: uuid.UUID,
    due_at: datetime,
    status: str = "Pending",
    attempts: int = 0,
) -> uuid.UUID:
    reminder_id = uuid.uuid4()
    await conn.execute(
        "INSERT INTO calendar.event_reminders (reminder_id, event_id, offset_minutes, due_at, "
        "status, sent_at, skip_reason, attempts, last_error_code, next_attempt_at) "
        "VALUES ($1, $2, $3, $4::timestamptz, $5::text, CASE WHEN $5 = 'Sent' THEN $4 END, "
        "CASE WHEN $5 = 'Skipped' THEN 'EventCancelled' END, $6, "
        "CASE WHEN $6 > 0 THEN 'InvalidReminder' END, "
        "CASE WHEN $6::int > 0 THEN $4 + interval '1 hour' ELSE '-infinity' END)",
        reminder_id,
        event_id,
        int((T0 + timedelta(days=2) - due_at).total_seconds() // 60),
        due_at,
        status,
        attempts,
    )
    return reminder_id


async def calendar_rows(
    conn: asyncpg.Connection, per_state: int = 5, base: datetime = T0
) -> Seeded:
    """``per_state`` reminders Pending, Sent and Skipped and 2 retrying (Pending with failed
    attempts), every other one of tenant A, due a minute apart from ``base`` on (a running
    worker dispatches the Pending ones once they are due)."""
    seeded = Seeded()
    events = {
        TENANT_A: await event(conn, TENANT_A, OWNER_A),
        TENANT_B: await event(conn, TENANT_B, OWNER_B),
    }
    n = 0
    for status, count, attempts in (
        ("Pending", per_state, 0),
        ("Retrying", 2, 3),
        ("Sent", per_state, 0),
        ("Skipped", per_state, 0),
    ):
        ids = []
        for i in range(count):
            tenant = TENANT_A if i % 2 == 0 else TENANT_B
            n += 1
            rid = await reminder(
                conn,
                events[tenant],
                base + timedelta(minutes=n),
                "Pending" if status == "Retrying" else status,
                attempts,
            )
            ids.append(rid)
            seeded.events[rid] = events[tenant]
            if tenant == TENANT_A:
                seeded.tenant_a.append(rid)
        seeded.reminders[status] = ids
    return seeded


async def outbox(
    conn: asyncpg.Connection,
    key: str,
    payload: dict[str, Any],
    *,
    published: bool = False,
    parked: str | None = None,
) -> int:
    """One outbox record of ``key``: published (partition 0, offset = its id), waiting, or
    parked with that reason."""
    if parked is not None:
        return int(
            await conn.fetchval(
                "INSERT INTO ops.outbox_parked (id, topic, key, payload, created_at, parked_at, "
                "reason, error, refusals) VALUES "
                "(nextval(pg_get_serial_sequence('ops.outbox', 'id')), "
                "'t', $1, $2::json, now(), now(), $3, 'refused', 1) RETURNING id",
                key,
                json.dumps(payload),
                parked,
            )
        )
    return int(
        await conn.fetchval(
            "INSERT INTO ops.outbox (topic, key, payload, published_at, published_partition, "
            "published_offset) VALUES ('t', $1, $2::json, CASE WHEN $3::bool THEN now() END, "
            "CASE WHEN $3 THEN 0 END, CASE WHEN $3 THEN 7 END) RETURNING id",
            key,
            json.dumps(payload),
            published,
        )
    )


async def scheduler_row(
    conn: asyncpg.Connection,
    key: str,
    scheduled_on: datetime,
    status: str = "Pending",
    *,
    setting: uuid.UUID | None = None,
    on_hold: bool = False,
) -> int:
    return int(
        await conn.fetchval(
            "INSERT INTO automation.scheduler (automation_type_id, trigger_type_id, "
            "scheduler_key, scheduled_on, status_id, input_hash, setting_guid, "
            "is_on_support_hold, processing_lease_expires_on, retry_count, last_error) "
            "VALUES ('Reminder', 'DateBased', $1, $2::timestamptz, $3::text, $4, $5, $6::bool, "
            "CASE WHEN $3 = 'Processing' THEN $2 + interval '5 minutes' END, "
            "CASE WHEN $6 THEN 5 ELSE 0 END, CASE WHEN $6 THEN 'boom' END) "
            "RETURNING scheduler_id",
            key,
            scheduled_on,
            status,
            HASH,
            setting,
            on_hold,
        )
    )


async def setting(conn: asyncpg.Connection, business_unit: uuid.UUID) -> uuid.UUID:
    guid = uuid.uuid4()
    await conn.execute(
        "INSERT INTO automation.reminder_settings (setting_guid, business_unit_id, source_type, "
        "trigger_type, trigger_key, send_time_local, active, version) "
        "VALUES ($1, $2, 'Invoice', 'DateBased', 'DueDate', '09:00', true, 1)",
        guid,
        business_unit,
    )
    return guid


async def marker(
    conn: asyncpg.Connection, owner: uuid.UUID, reminded_at: datetime, threshold: int = 30
) -> tuple[uuid.UUID, uuid.UUID]:
    """A marker (id, document id)."""
    marker_id, document = uuid.uuid4(), uuid.uuid4()
    await conn.execute(
        "INSERT INTO profile.document_expiry_reminders (id, document_id, owner_user_id, type, "
        "threshold_days, expires_at, reminded_at) VALUES ($1, $2, $3, 'Passport', $4, $5, $6)",
        marker_id,
        document,
        owner,
        threshold,
        (reminded_at + timedelta(days=threshold)).date(),
        reminded_at,
    )
    return marker_id, document


async def run(
    conn: asyncpg.Connection, run_id: str, started_at: datetime, *, finished: bool, failed: int = 0
) -> None:
    await conn.execute(
        "INSERT INTO profile.document_expiry_runs (run_id, slot, as_of_date, thresholds, "
        "started_at, owners_total, owners_done, owners_failed, finished_at) "
        "VALUES ($1, $2::timestamptz, $3, '{30,7}', $2, 4, 4, $4, CASE WHEN $5::bool THEN $2 + interval '1 minute' END)",
        run_id,
        started_at,
        started_at.date(),
        failed,
        finished,
    )
