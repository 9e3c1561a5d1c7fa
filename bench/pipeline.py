"""The ingest bench's references, no Faust:

- ``bare_pipeline``: aiokafka consume + ``json`` + asyncpg writing the SAME rows the worker
  writes (calendar.events and its calendar.event_reminders rows: same columns, reminder ids
  from the domain's ``reminder_id``, the Version guard, only the reminders of applied open
  events that are not already due when the change happened), per batch of up to 500
  messages one ``unnest`` upsert of events and one insert of reminders in one transaction,
  offsets committed after the database commit;
- ``consume_only``: aiokafka reading the same messages and doing nothing with them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
from aiokafka import AIOKafkaConsumer

from bench.common import KAFKA_BOOTSTRAP
from bench.progress import Progress
from streams.domain.calendar import reminder_id

BATCH = 500
OPEN = frozenset({"Planned", "InProgress"})

# calendar_events_upsert's work with the columns as text where PostgreSQL parses them.
EVENTS_UPSERT = """
INSERT INTO calendar.events AS e (
    event_id, tenant_id, owner_user_id, client_user_id, kind, start_at, time_zone, status,
    reminder_offsets_minutes, appointment_id, version, occurred_at, updated_at,
    source_partition, source_offset)
SELECT u.event_id, u.tenant_id, u.owner_user_id, u.client_user_id, u.kind,
       u.start_at::timestamptz, u.time_zone, u.status, u.offsets::int[], u.appointment_id,
       u.version, u.occurred_at::timestamptz, $13, u.source_partition, u.source_offset
FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[], $6::text[],
            $7::text[], $8::text[], $9::text[], $10::uuid[], $11::bigint[], $12::text[],
            $14::int[], $15::bigint[])
     AS u(event_id, tenant_id, owner_user_id, client_user_id, kind, start_at, time_zone, status,
          offsets, appointment_id, version, occurred_at, source_partition, source_offset)
ON CONFLICT (event_id) DO UPDATE SET
    tenant_id = EXCLUDED.tenant_id, owner_user_id = EXCLUDED.owner_user_id,
    client_user_id = EXCLUDED.client_user_id, kind = EXCLUDED.kind,
    start_at = EXCLUDED.start_at, time_zone = EXCLUDED.time_zone, status = EXCLUDED.status,
    reminder_offsets_minutes = EXCLUDED.reminder_offsets_minutes,
    appointment_id = EXCLUDED.appointment_id, version = EXCLUDED.version,
    occurred_at = EXCLUDED.occurred_at, updated_at = EXCLUDED.updated_at,
    source_partition = EXCLUDED.source_partition, source_offset = EXCLUDED.source_offset
WHERE e.version < EXCLUDED.version
RETURNING e.event_id
"""
# calendar_reminders_ensure's work: insert, or make a Skipped row wanted again Pending.
REMINDERS_INSERT = """
INSERT INTO calendar.event_reminders AS r (
    reminder_id, event_id, offset_minutes, due_at, status, created_at, updated_at,
    source_partition, source_offset, source_version)
SELECT w.reminder_id, w.event_id, w.offset_minutes, w.due_at, 'Pending', $5, $5,
       w.source_partition, w.source_offset, w.source_version
FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::timestamptz[], $6::int[], $7::bigint[],
            $8::bigint[])
     AS w(reminder_id, event_id, offset_minutes, due_at, source_partition, source_offset,
          source_version)
ON CONFLICT (reminder_id) DO UPDATE SET
    status = 'Pending', skip_reason = NULL, updated_at = EXCLUDED.updated_at,
    source_partition = EXCLUDED.source_partition, source_offset = EXCLUDED.source_offset,
    source_version = EXCLUDED.source_version
WHERE r.status = 'Skipped'
"""

# A decoded message with where it was read: (body, partition, offset).
Message = tuple[dict[str, Any], int | None, int | None]


def newest(messages: Sequence[Message]) -> list[Message]:
    """The newest Version of each event in the batch (state messages: only the last counts)."""
    out: dict[str, Message] = {}
    for m in messages:
        seen = out.get(m[0]["EventId"])
        if seen is None or m[0]["Version"] > seen[0]["Version"]:
            out[m[0]["EventId"]] = m
    return list(out.values())


def event_columns(messages: Sequence[Message]) -> list[list[Any]]:
    """EVENTS_UPSERT's arrays $1..$12 then $14, $15 (offsets sorted and distinct)."""
    cols: list[list[Any]] = [[] for _ in range(14)]
    for body, partition, offset in messages:
        offsets = sorted(set(body.get("ReminderOffsetsMinutes") or []))
        row = (
            body["EventId"], body["TenantId"], body["OwnerUserId"], body.get("ClientUserId"),
            body["Kind"], body["StartAt"], body["TimeZone"], body["Status"],
            "{" + ",".join(map(str, offsets)) + "}", body.get("AppointmentId"),
            body["Version"], body["OccurredAt"], partition, offset,
        )  # fmt: skip
        for col, value in zip(cols, row, strict=True):
            col.append(value)
    return cols


def reminder_columns(messages: Sequence[Message], applied: set[str]) -> list[list[Any]]:
    """REMINDERS_INSERT's arrays $1..$4 then $6..$8: one row per distinct offset of each
    applied open event, DueAt = StartAt - offset, unless already due at OccurredAt."""
    cols: list[list[Any]] = [[] for _ in range(7)]
    for body, partition, offset in messages:
        event = body["EventId"]
        if event not in applied or body["Status"] not in OPEN:
            continue
        start = datetime.fromisoformat(body["StartAt"])
        occurred = datetime.fromisoformat(body["OccurredAt"])
        event_uuid = UUID(event)
        for minutes in sorted(set(body.get("ReminderOffsetsMinutes") or [])):
            due = start - timedelta(minutes=minutes)
            if due < occurred:
                continue
            row = (
                reminder_id(event_uuid, minutes, due), event, minutes, due,
                partition, offset, body["Version"],
            )  # fmt: skip
            for col, value in zip(cols, row, strict=True):
                col.append(value)
    return cols


async def write_batch(conn: asyncpg.Connection, messages: Sequence[Message]) -> int:
    """One transaction: the events upsert, then the applied events' reminders; returns the
    number of reminder rows offered."""
    batch = newest(messages)
    now = datetime.now(UTC)
    async with conn.transaction():
        ev = event_columns(batch)
        applied = await conn.fetch(EVENTS_UPSERT, *ev[:12], now, *ev[12:])
        rem = reminder_columns(batch, {str(r["event_id"]) for r in applied})
        if rem[0]:
            await conn.execute(REMINDERS_INSERT, *rem[:4], now, *rem[4:])
    return len(rem[0])


async def bare_pipeline(url: str, topic: str, group: str, events: int) -> float:
    """Events/s from the first batch read to the last offsets committed."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=KAFKA_BOOTSTRAP,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    conn = await asyncpg.connect(url)
    await consumer.start()
    try:
        done, started = 0, 0.0
        with Progress("  bare pipeline", total=events, unit="events") as progress:
            while done < events:
                batch = await consumer.getmany(timeout_ms=1000, max_records=BATCH)
                if not batch:
                    continue
                if not done:
                    started = time.perf_counter()
                messages = [
                    (json.loads(r.value), r.partition, r.offset)
                    for records in batch.values()
                    for r in records
                    if r.value is not None
                ]
                await write_batch(conn, messages)
                await consumer.commit({tp: records[-1].offset + 1 for tp, records in batch.items()})
                done += sum(len(records) for records in batch.values())
                progress.update(done)
        return events / (time.perf_counter() - started)
    finally:
        await consumer.stop()
        await conn.close()


async def consume_only(topic: str, events: int) -> float:
    """Msgs/s of a bare aiokafka consumer reading ``events`` messages from the start."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=KAFKA_BOOTSTRAP,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        seen, started = 0, 0.0
        while seen < events:
            for records in (await consumer.getmany(timeout_ms=500, max_records=5000)).values():
                if not seen:
                    started = time.perf_counter()
                seen += len(records)
        return events / (time.perf_counter() - started)
    finally:
        await consumer.stop()
