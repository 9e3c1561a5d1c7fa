-- calendar.event_reminders: the reminder rows of events (dispatch claim and marks).

-- name: event_reminders_claim_due
-- Claimable reminders (Pending, due, not backing off after a failed attempt), oldest first
-- (ties by id: a total order), with their parent event, locked for this transaction.
-- SKIP LOCKED passes over rows another instance holds and events an in-flight change
-- (reschedule/cancel) holds; FOR SHARE on the event lets two dispatchers work on reminders
-- of the same event.
-- ``seen_due`` counts (lock-free, same snapshot) the claimable rows the claim's scan went
-- through: all of them when the batch came back short, else those up to its last claimed
-- key. ``seen_due`` minus the rows claimed is what SKIP LOCKED passed over, also when the
-- batch is full (a count capped at the batch size is then always the batch size).
-- ``waiting``/``waiting_oldest``: due rows backing off (not claimable at $1).
-- ``next_wake`` is the earliest time after $1 at which a Pending row becomes claimable (its
-- DueAt, or its retry time): when the batch took every due row it saw (none passed over,
-- no poison, not full), the dispatcher wakes there without asking
-- event_reminders_due_state after the run.
-- ``source_traceparent`` is the trace context of the input that stored the event's state
-- (NULL when tracing was off): the reminder's output record continues that trace.
-- $1 as_of, $2 batch size, $3 reminder ids to leave out (poison rows seen this run).
WITH claimed AS (
    SELECT r.reminder_id, r.event_id, r.offset_minutes, r.due_at, r.attempts,
           e.tenant_id, e.owner_user_id, e.client_user_id, e.kind, e.start_at, e.time_zone,
           e.status AS event_status, e.appointment_id, e.source_traceparent
    FROM calendar.event_reminders r
    JOIN calendar.events e ON e.event_id = r.event_id
    WHERE r.status = 'Pending' AND r.due_at < $1 AND r.next_attempt_at <= $1
      AND r.reminder_id <> ALL($3::uuid[])
    ORDER BY r.due_at, r.reminder_id
    LIMIT $2
    FOR NO KEY UPDATE OF r SKIP LOCKED
    FOR SHARE OF e SKIP LOCKED
), bound AS (
    -- The last key the scan reached: the last claimed one when the batch is full, else
    -- past every due row.
    SELECT CASE WHEN count(*) < $2 THEN $1::timestamptz ELSE max(due_at) END AS due_at,
           CASE WHEN count(*) < $2 THEN 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid
                ELSE (SELECT reminder_id FROM claimed
                      ORDER BY due_at DESC, reminder_id DESC LIMIT 1) END AS reminder_id
    FROM claimed
), seen AS (
    SELECT count(*) AS n FROM calendar.event_reminders
    WHERE status = 'Pending' AND due_at < $1 AND next_attempt_at <= $1
      AND reminder_id <> ALL($3::uuid[])
      AND (due_at, reminder_id) <= ((SELECT due_at FROM bound), (SELECT reminder_id FROM bound))
), waiting AS (
    SELECT count(*) AS n, min(due_at) AS oldest FROM calendar.event_reminders
    WHERE status = 'Pending' AND attempts > 0 AND next_attempt_at > $1 AND due_at < $1
)
SELECT c.*, s.n AS seen_due, w.n AS waiting, w.oldest AS waiting_oldest,
       least((SELECT min(due_at) FROM calendar.event_reminders
              WHERE status = 'Pending' AND due_at >= $1 AND attempts = 0),
             (SELECT min(greatest(due_at, next_attempt_at)) FROM calendar.event_reminders
              WHERE status = 'Pending' AND attempts > 0 AND next_attempt_at > $1)) AS next_wake
FROM seen s CROSS JOIN waiting w LEFT JOIN claimed c ON true
ORDER BY c.due_at, c.reminder_id;

-- name: event_reminders_mark_dispatched
-- One claimed batch, one round trip: Sent (SentAt = AsOf) or Skipped with reason ($1..$3,
-- $4 AsOf), its ReminderDueEvents on the outbox ($5..$8 column-wise, as outbox_insert_many;
-- ids follow the input order), and its poison rows' retry state ($9..$11: id, retry time,
-- error code; they stay Pending). Keep "INSERT INTO ops.outbox" within the first 1024
-- bytes: pg_stat_activity shows no more, and tests find a held batch by it.
WITH marked AS (
    UPDATE calendar.event_reminders r
    SET status = m.status,
        sent_at = CASE WHEN m.status = 'Sent' THEN $4::timestamptz END,
        skip_reason = m.reason,
        updated_at = $4
    FROM unnest($1::uuid[], $2::text[], $3::text[]) AS m(reminder_id, status, reason)
    WHERE r.reminder_id = m.reminder_id AND r.status = 'Pending'
    RETURNING 1
), queued AS (
    INSERT INTO ops.outbox (topic, key, payload, headers)
    SELECT o.topic, o.key, o.payload::json, o.headers::jsonb
    FROM unnest($5::text[], $6::text[], $7::text[], $8::text[])
        WITH ORDINALITY AS o(topic, key, payload, headers, ord)
    ORDER BY o.ord
    RETURNING 1
), failed AS (
    UPDATE calendar.event_reminders r
    SET attempts = r.attempts + 1, next_attempt_at = f.retry_at, last_error_code = f.code,
        updated_at = $4
    FROM unnest($9::uuid[], $10::timestamptz[], $11::text[]) AS f(reminder_id, retry_at, code)
    WHERE r.reminder_id = f.reminder_id AND r.status = 'Pending'
    RETURNING 1
)
SELECT (SELECT count(*) FROM marked)::int AS marked,
       (SELECT count(*) FROM queued)::int AS queued,
       (SELECT count(*) FROM failed)::int AS failed;

-- name: event_reminders_due_state
-- After a dispatch run, in one round trip: the due and still Pending rows (the seed's backlog
-- gauge; a range scan on the partial index), how many of them are claimable at $1 (not
-- backing off: left by this run, i.e. locked elsewhere or beyond its budget), the earliest
-- Pending DueAt (the oldest-due-age gauge) and the earliest time after $1 at which a Pending
-- row becomes claimable (its DueAt, or its retry time: where the dispatcher wakes next, as
-- in event_reminders_claim_due). $1 as_of.
SELECT b.backlog, b.ready,
       (SELECT min(due_at) FROM calendar.event_reminders WHERE status = 'Pending') AS oldest_due,
       least((SELECT min(due_at) FROM calendar.event_reminders
              WHERE status = 'Pending' AND due_at >= $1 AND attempts = 0),
             (SELECT min(greatest(due_at, next_attempt_at)) FROM calendar.event_reminders
              WHERE status = 'Pending' AND attempts > 0 AND next_attempt_at > $1)) AS next_wake
FROM (SELECT count(*) AS backlog, count(*) FILTER (WHERE next_attempt_at <= $1) AS ready
      FROM calendar.event_reminders WHERE status = 'Pending' AND due_at < $1) b;

-- name: event_reminders_status_count
-- Reminder rows of the given events by status.
SELECT status, count(*) AS n FROM calendar.event_reminders
WHERE event_id = ANY($1::uuid[])
GROUP BY status;

-- name: event_reminders_explain
-- One reminder with its event's current state and the input that made it (explain).
SELECT r.reminder_id, r.event_id, r.offset_minutes, r.due_at, r.status, r.skip_reason,
       r.sent_at, r.created_at, r.updated_at, r.source_partition, r.source_offset,
       r.source_version, r.attempts, r.last_error_code,
       CASE WHEN r.next_attempt_at > '-infinity' THEN r.next_attempt_at END AS next_attempt_at,
       e.version AS event_version, e.status AS event_status,
       e.source_partition AS event_source_partition, e.source_offset AS event_source_offset
FROM calendar.event_reminders r
JOIN calendar.events e ON e.event_id = r.event_id
WHERE r.reminder_id = $1;

-- name: event_reminders_console_pending
-- The console's page of Pending rows (streams/console): (due_at, reminder_id) after the
-- keyset bound ($1, $2; the cursor, or just before the window's start), before $3, at most
-- $4, on ix_event_reminders_status_due_at. $5 tenant, $6 owner of the event (NULL: any): a
-- filter on the joined event as rows come in index order.
SELECT r.reminder_id, r.event_id, r.offset_minutes, r.due_at, r.status, r.sent_at,
       r.skip_reason, r.attempts, r.last_error_code,
       CASE WHEN r.next_attempt_at > '-infinity' THEN r.next_attempt_at END AS next_attempt_at,
       r.created_at, r.updated_at, e.tenant_id, e.owner_user_id, e.kind, e.start_at
FROM calendar.event_reminders r
JOIN calendar.events e ON e.event_id = r.event_id
WHERE r.status = 'Pending'
  AND (r.due_at, r.reminder_id) > ($1::timestamptz, $2::uuid) AND r.due_at < $3
  AND ($5::uuid IS NULL OR e.tenant_id = $5) AND ($6::uuid IS NULL OR e.owner_user_id = $6)
ORDER BY r.due_at, r.reminder_id
LIMIT $4;

-- name: event_reminders_console_retrying
-- The console's page of Pending rows with failed dispatch attempts (poison rows backing off),
-- as event_reminders_console_pending; few rows, read through ix_event_reminders_retry.
SELECT r.reminder_id, r.event_id, r.offset_minutes, r.due_at, r.status, r.sent_at,
       r.skip_reason, r.attempts, r.last_error_code,
       CASE WHEN r.next_attempt_at > '-infinity' THEN r.next_attempt_at END AS next_attempt_at,
       r.created_at, r.updated_at, e.tenant_id, e.owner_user_id, e.kind, e.start_at
FROM calendar.event_reminders r
JOIN calendar.events e ON e.event_id = r.event_id
WHERE r.status = 'Pending' AND r.attempts > 0
  AND (r.due_at, r.reminder_id) > ($1::timestamptz, $2::uuid) AND r.due_at < $3
  AND ($5::uuid IS NULL OR e.tenant_id = $5) AND ($6::uuid IS NULL OR e.owner_user_id = $6)
ORDER BY r.due_at, r.reminder_id
LIMIT $4;

-- name: event_reminders_console_done
-- The console's page of Sent or Skipped rows ($7), as event_reminders_console_pending, on
-- ix_event_reminders_console_done (the literal "status <> 'Pending'" lets a generic plan
-- use that partial index).
SELECT r.reminder_id, r.event_id, r.offset_minutes, r.due_at, r.status, r.sent_at,
       r.skip_reason, r.attempts, r.last_error_code,
       CASE WHEN r.next_attempt_at > '-infinity' THEN r.next_attempt_at END AS next_attempt_at,
       r.created_at, r.updated_at, e.tenant_id, e.owner_user_id, e.kind, e.start_at
FROM calendar.event_reminders r
JOIN calendar.events e ON e.event_id = r.event_id
WHERE r.status = $7 AND r.status <> 'Pending'
  AND (r.due_at, r.reminder_id) > ($1::timestamptz, $2::uuid) AND r.due_at < $3
  AND ($5::uuid IS NULL OR e.tenant_id = $5) AND ($6::uuid IS NULL OR e.owner_user_id = $6)
ORDER BY r.due_at, r.reminder_id
LIMIT $4;

-- name: event_reminders_console_by_owner
-- The console's page of one owner's rows ($6; $5 tenant, NULL: any) of state $7 (Pending,
-- Sent or Skipped; $8: only rows with failed attempts, the Retrying state), as
-- event_reminders_console_pending: the owner's events on ix_events_owner, each event's few
-- reminders on ux_event_reminders_identity, sorted. Bounded by the owner's events, whatever
-- the table's size; an owner with none costs one index probe.
SELECT r.reminder_id, r.event_id, r.offset_minutes, r.due_at, r.status, r.sent_at,
       r.skip_reason, r.attempts, r.last_error_code,
       CASE WHEN r.next_attempt_at > '-infinity' THEN r.next_attempt_at END AS next_attempt_at,
       r.created_at, r.updated_at, e.tenant_id, e.owner_user_id, e.kind, e.start_at
FROM calendar.events e
JOIN calendar.event_reminders r ON r.event_id = e.event_id
WHERE e.owner_user_id = $6 AND ($5::uuid IS NULL OR e.tenant_id = $5)
  AND r.status = $7 AND (NOT $8::boolean OR r.attempts > 0)
  AND (r.due_at, r.reminder_id) > ($1::timestamptz, $2::uuid) AND r.due_at < $3
ORDER BY r.due_at, r.reminder_id
LIMIT $4;

-- name: event_reminders_console_counts
-- Rows by console state, each counted up to $1 (an index range that stops there: the
-- console shows "$1 or more" rather than scanning ten million rows).
SELECT 'Pending' AS state, (SELECT count(*) FROM (SELECT 1 FROM calendar.event_reminders
                            WHERE status = 'Pending' LIMIT $1) x) AS n
UNION ALL
SELECT 'Retrying', (SELECT count(*) FROM (SELECT 1 FROM calendar.event_reminders
                    WHERE status = 'Pending' AND attempts > 0 LIMIT $1) x)
UNION ALL
SELECT 'Sent', (SELECT count(*) FROM (SELECT 1 FROM calendar.event_reminders
                WHERE status = 'Sent' LIMIT $1) x)
UNION ALL
SELECT 'Skipped', (SELECT count(*) FROM (SELECT 1 FROM calendar.event_reminders
                   WHERE status = 'Skipped' LIMIT $1) x);
-- name: event_reminders_console_retry
-- The console's retry of a poison row (Pending, backing off after failed attempts): its
-- retry state is cleared, so the next dispatch run claims it (the claim needs
-- next_attempt_at <= now, the wake-up looks for retry times only on rows with attempts > 0).
-- Only a Pending row with attempts changes; a Pending row without is unchanged (nothing to
-- retry); Sent and Skipped rows are refused. Audited in the same statement.
-- $1 reminder id, $2 actor, $3 reason, $4 now, $5 listing.
WITH cur AS (
    SELECT reminder_id, status, attempts FROM calendar.event_reminders
    WHERE reminder_id = $1::uuid
    FOR NO KEY UPDATE
), upd AS (
    UPDATE calendar.event_reminders r
    SET attempts = 0, next_attempt_at = '-infinity', last_error_code = NULL, updated_at = $4
    FROM cur
    WHERE r.reminder_id = cur.reminder_id AND cur.status = 'Pending' AND cur.attempts > 0
    RETURNING r.status
), res AS (
    SELECT CASE WHEN cur.reminder_id IS NULL THEN 'not_found'
                WHEN EXISTS (SELECT 1 FROM upd) THEN 'changed'
                WHEN cur.status = 'Pending' THEN 'unchanged'
                ELSE 'refused' END AS outcome,
           cur.status || CASE WHEN cur.attempts > 0 THEN ', ' || cur.attempts || ' failed attempts'
                              ELSE '' END AS state_before,
           cur.status AS state_after
    FROM (SELECT 1) one LEFT JOIN cur ON true
), aud AS (
    INSERT INTO ops.console_audit (at, actor, action, listing, target, reason, outcome,
                                   state_before, state_after)
    SELECT $4, $2, 'retry', $5, $1::uuid::text, $3, outcome, state_before, state_after FROM res
    RETURNING id
)
SELECT res.outcome, res.state_before, res.state_after, aud.id AS audit_id
FROM res CROSS JOIN aud;

-- name: event_reminders_console_cancel
-- The console's cancel of a Pending reminder: Skipped with skip_reason 'ManualCancel', an
-- operator's decision that no input undoes (events_apply never makes such a row Pending
-- again; only event_reminders_console_reopen does). A row cancelled already is unchanged;
-- Sent and otherwise Skipped rows are refused. Audited in the same statement. $1 reminder
-- id, $2 actor, $3 reason, $4 now, $5 listing.
WITH cur AS (
    SELECT reminder_id, status, skip_reason FROM calendar.event_reminders
    WHERE reminder_id = $1::uuid
    FOR NO KEY UPDATE
), upd AS (
    UPDATE calendar.event_reminders r
    SET status = 'Skipped', skip_reason = 'ManualCancel', updated_at = $4
    FROM cur
    WHERE r.reminder_id = cur.reminder_id AND cur.status = 'Pending'
    RETURNING r.status, r.skip_reason
), res AS (
    SELECT CASE WHEN cur.reminder_id IS NULL THEN 'not_found'
                WHEN EXISTS (SELECT 1 FROM upd) THEN 'changed'
                WHEN cur.status = 'Skipped' AND cur.skip_reason = 'ManualCancel'
                    THEN 'unchanged'
                ELSE 'refused' END AS outcome,
           cur.status || coalesce(' (' || cur.skip_reason || ')', '') AS state_before,
           coalesce((SELECT status || ' (' || skip_reason || ')' FROM upd),
                    cur.status || coalesce(' (' || cur.skip_reason || ')', '')) AS state_after
    FROM (SELECT 1) one LEFT JOIN cur ON true
), aud AS (
    INSERT INTO ops.console_audit (at, actor, action, listing, target, reason, outcome,
                                   state_before, state_after)
    SELECT $4, $2, 'cancel', $5, $1::uuid::text, $3, outcome, state_before, state_after
    FROM res
    RETURNING id
)
SELECT res.outcome, res.state_before, res.state_after, aud.id AS audit_id
FROM res CROSS JOIN aud;

-- name: event_reminders_console_reopen
-- The console's undo of its own cancel: a row Skipped with 'ManualCancel' is handed back to
-- its event, becoming what the event's current state makes it: Pending when that state
-- still wants it (open, its offset among the event's, DueAt = StartAt - offset; due at its
-- DueAt, at once when that is past, with no earlier backoff), else Skipped with the reason
-- the event gives ($6 closed statuses, $7 their reasons, $8 the reason of an open event's
-- unwanted row; streams/domain/calendar.py), and from then on it follows its event's inputs
-- as any row. The event row is locked (FOR SHARE) before the reminder, in the order
-- events_apply locks them (no deadlock): a change of the event in flight commits first and
-- is what the row is handed back to; one that starts while this holds the event waits, and
-- its skip re-reads the row this made Pending (events_apply). A row whose last changed
-- console action is a reopen (and not Sent since) is unchanged (asked twice); every other
-- row is refused. Audited in the same statement. $1 reminder id, $2 actor, $3 reason,
-- $4 now, $5 listing.
WITH ev AS MATERIALIZED (
    SELECT e.event_id, e.status, e.start_at, e.reminder_offsets_minutes
    FROM calendar.events e
    WHERE e.event_id = (SELECT event_id FROM calendar.event_reminders
                        WHERE reminder_id = $1::uuid)
    FOR SHARE
), cur AS (
    -- The event's lock first: the scalar subquery runs before the reminder row is locked.
    SELECT r.reminder_id, r.event_id, r.offset_minutes, r.due_at, r.status, r.skip_reason,
           CASE WHEN (SELECT status FROM ev) = ANY ($6::text[])
                    THEN ($7::text[])[array_position($6, (SELECT status FROM ev))]
                WHEN r.offset_minutes = ANY ((SELECT reminder_offsets_minutes FROM ev)::int[])
                     AND (SELECT start_at FROM ev) - make_interval(mins => r.offset_minutes)
                         = r.due_at
                    THEN NULL
                ELSE $8::text END AS unwanted
    FROM calendar.event_reminders r
    WHERE r.reminder_id = $1::uuid AND r.event_id = (SELECT event_id FROM ev)
    FOR NO KEY UPDATE
), upd AS (
    UPDATE calendar.event_reminders r
    SET status = CASE WHEN cur.unwanted IS NULL THEN 'Pending' ELSE 'Skipped' END,
        skip_reason = cur.unwanted,
        attempts = 0, next_attempt_at = '-infinity', last_error_code = NULL, updated_at = $4
    FROM cur
    WHERE r.reminder_id = cur.reminder_id AND cur.status = 'Skipped'
      AND cur.skip_reason = 'ManualCancel'
    RETURNING r.status, r.skip_reason
), res AS (
    SELECT CASE WHEN cur.reminder_id IS NULL THEN 'not_found'
                WHEN EXISTS (SELECT 1 FROM upd) THEN 'changed'
                WHEN cur.status <> 'Sent' AND (
                    SELECT a.action FROM ops.console_audit a
                    WHERE a.listing = $5 AND a.target = $1::uuid::text AND a.outcome = 'changed'
                    ORDER BY a.at DESC, a.id DESC LIMIT 1) = 'reopen'
                    THEN 'unchanged'
                ELSE 'refused' END AS outcome,
           cur.status || coalesce(' (' || cur.skip_reason || ')', '') AS state_before,
           coalesce((SELECT status || coalesce(' (' || skip_reason || ')', '') FROM upd),
                    cur.status || coalesce(' (' || cur.skip_reason || ')', '')) AS state_after
    FROM (SELECT 1) one LEFT JOIN cur ON true
), aud AS (
    INSERT INTO ops.console_audit (at, actor, action, listing, target, reason, outcome,
                                   state_before, state_after)
    SELECT $4, $2, 'reopen', $5, $1::uuid::text, $3, outcome, state_before, state_after
    FROM res
    RETURNING id
)
SELECT res.outcome, res.state_before, res.state_after, aud.id AS audit_id
FROM res CROSS JOIN aud;

-- name: event_reminders_lateness_minutes
-- The overview's calendar chart: per minute of DueAt in [$1, $2), the reminders sent and
-- the p95 and max of their lateness (SentAt - DueAt, seed 000's SLO). One backward range of
-- ix_event_reminders_console_done (status, due_at, ...) WHERE status <> 'Pending' over the
-- Sent rows, at most $3 of them, newest first: bounded whatever the traffic.
WITH sent AS (
    SELECT due_at, sent_at FROM calendar.event_reminders
    WHERE status = 'Sent' AND due_at >= $1 AND due_at < $2
    ORDER BY status, due_at DESC LIMIT $3
)
SELECT date_trunc('minute', due_at) AS minute, count(*)::int AS sent,
       percentile_cont(0.95) WITHIN GROUP (
           ORDER BY extract(epoch FROM sent_at - due_at)::float8) AS lateness_p95_seconds,
       max(extract(epoch FROM sent_at - due_at))::float8 AS lateness_max_seconds
FROM sent WHERE sent_at IS NOT NULL
GROUP BY 1 ORDER BY 1;
