-- Calendar context statements (events projection, reminder rows, dispatch).

-- name: calendar_events_upsert
-- Applies each event state only when its Version is newer than the stored one;
-- returns the events that changed (stale and replayed states return nothing).
INSERT INTO calendar.events AS e (
    event_id, tenant_id, owner_user_id, client_user_id, kind, start_at, time_zone, status,
    reminder_offsets_minutes, appointment_id, version, occurred_at, updated_at)
SELECT u.event_id, u.tenant_id, u.owner_user_id, u.client_user_id, u.kind, u.start_at, u.time_zone,
       u.status, coalesce((SELECT array_agg(x::int) FROM unnest(string_to_array(u.offsets, ',')) x
                           WHERE x <> ''), '{}'),
       u.appointment_id, u.version, u.occurred_at, $13
FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[], $6::timestamptz[],
            $7::text[], $8::text[], $9::text[], $10::uuid[], $11::bigint[], $12::timestamptz[])
     AS u(event_id, tenant_id, owner_user_id, client_user_id, kind, start_at, time_zone, status,
          offsets, appointment_id, version, occurred_at)
ON CONFLICT (event_id) DO UPDATE SET
    tenant_id = EXCLUDED.tenant_id,
    owner_user_id = EXCLUDED.owner_user_id,
    client_user_id = EXCLUDED.client_user_id,
    kind = EXCLUDED.kind,
    start_at = EXCLUDED.start_at,
    time_zone = EXCLUDED.time_zone,
    status = EXCLUDED.status,
    reminder_offsets_minutes = EXCLUDED.reminder_offsets_minutes,
    appointment_id = EXCLUDED.appointment_id,
    version = EXCLUDED.version,
    occurred_at = EXCLUDED.occurred_at,
    updated_at = EXCLUDED.updated_at
WHERE e.version < EXCLUDED.version
RETURNING e.event_id;

-- name: calendar_reminders_skip_unwanted
-- Pending rows of the changed events that their new state no longer wants → Skipped,
-- with the reason (cascade of a closed event, or a reschedule / removed offset).
UPDATE calendar.event_reminders r
SET status = 'Skipped',
    skip_reason = CASE e.status WHEN 'Cancelled' THEN 'EventCancelled'
                                WHEN 'Completed' THEN 'EventCompleted'
                                ELSE 'NoLongerScheduled' END,
    updated_at = $3
FROM calendar.events e
WHERE r.status = 'Pending'
  AND r.event_id = ANY($1::uuid[])
  AND e.event_id = r.event_id
  AND r.reminder_id <> ALL($2::uuid[])
RETURNING r.reminder_id;

-- name: calendar_reminders_ensure
-- Inserts wanted reminders; a Skipped one that is wanted again (e.g. rescheduled back)
-- becomes Pending again. Sent rows are history and never change. Returns the rows made
-- Pending, so the dispatcher can be woken for the earliest DueAt.
INSERT INTO calendar.event_reminders AS r (
    reminder_id, event_id, offset_minutes, due_at, status, created_at, updated_at)
SELECT w.reminder_id, w.event_id, w.offset_minutes, w.due_at, 'Pending', $5, $5
FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::timestamptz[])
     AS w(reminder_id, event_id, offset_minutes, due_at)
ON CONFLICT (reminder_id) DO UPDATE SET
    status = 'Pending', skip_reason = NULL, updated_at = EXCLUDED.updated_at
WHERE r.status = 'Skipped'
RETURNING r.reminder_id, r.due_at;
