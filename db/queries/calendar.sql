-- Calendar context statements (events projection, reminder rows, dispatch).

-- name: calendar_events_apply
-- One batch of event states in one statement. Each state is stored only when its Version
-- is newer than the stored one (stale and replayed states change nothing). For the events
-- stored, and only those: their Pending reminders that the new state no longer wants become
-- Skipped with the reason the domain gives for that event ($16, one per event of $1), and
-- the reminders it wants and may create ($18..$21, already filtered by the domain) are
-- inserted, a Skipped one wanted again (e.g. rescheduled back) becoming Pending again; Sent
-- rows are history and never change. Wanted = $18 plus $17 (wanted, but already due when
-- the change happened: kept if they exist, never created). The two reminder changes touch
-- disjoint rows (wanted vs not wanted).
-- The input message (partition, offset, Version) is kept for explain, on the event and on
-- the reminders it creates (taken from the stored event: one value per event on the wire).
-- Only an event that was stored before can have reminders to skip (a reminder needs its
-- event, by foreign key): the probe is for updated events, not inserted ones (xmax = 0 on
-- the row an INSERT ... ON CONFLICT inserted; the updated row carries its updater's lock).
-- Offsets come as an array literal ($9: '{15,60}', sorted and distinct). $22 is each state's
-- content fingerprint, stored with it (calendar_events_version_advance compares it).
-- An event retention pruned is stored again only for a Version newer than its tombstone.
-- Returns one row per stored event (event_id), one per reminder made Pending (due_at, to
-- wake the dispatcher) and one with the number of reminders Skipped.
WITH up AS (
    INSERT INTO calendar.events AS e (
        event_id, tenant_id, owner_user_id, client_user_id, kind, start_at, time_zone, status,
        reminder_offsets_minutes, appointment_id, version, occurred_at, updated_at,
        source_partition, source_offset, fingerprint)
    SELECT u.event_id, u.tenant_id, u.owner_user_id, u.client_user_id, u.kind, u.start_at,
           u.time_zone, u.status,
           u.offsets::int[],
           u.appointment_id, u.version, u.occurred_at, $13, u.source_partition, u.source_offset,
           u.fingerprint
    FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[], $6::timestamptz[],
                $7::text[], $8::text[], $9::text[], $10::uuid[], $11::bigint[],
                $12::timestamptz[], $14::int[], $15::bigint[], $22::text[])
         AS u(event_id, tenant_id, owner_user_id, client_user_id, kind, start_at, time_zone,
              status, offsets, appointment_id, version, occurred_at, source_partition,
              source_offset, fingerprint)
    -- A pruned event (migration 0024): only a Version newer than its tombstone is stored,
    -- and an input that happened before the prune horizon (raised as tombstones go, more
    -- than a year after their prune) is stale, whether or not the event still has a row.
    WHERE NOT EXISTS (
              SELECT 1 FROM calendar.event_tombstones t
              WHERE t.event_id = u.event_id AND t.version >= u.version)
      AND u.occurred_at >= COALESCE(
              (SELECT h.occurred_before FROM calendar.event_prune_horizon h), '-infinity')
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
        updated_at = EXCLUDED.updated_at,
        source_partition = EXCLUDED.source_partition,
        source_offset = EXCLUDED.source_offset,
        fingerprint = EXCLUDED.fingerprint
    WHERE e.version < EXCLUDED.version
    RETURNING e.event_id, e.version, e.source_partition, e.source_offset,
              e.xmax = 0 AS inserted
), skipped AS (
    UPDATE calendar.event_reminders r
    SET status = 'Skipped', skip_reason = c.reason, updated_at = $13
    FROM unnest($1::uuid[], $16::text[]) AS c(event_id, reason)
    WHERE r.status = 'Pending'
      AND r.event_id = c.event_id
      AND c.event_id IN (SELECT event_id FROM up WHERE NOT inserted)
      AND r.reminder_id <> ALL($17::uuid[])
      AND r.reminder_id <> ALL($18::uuid[])
    RETURNING r.reminder_id
), made AS (
    INSERT INTO calendar.event_reminders AS r (
        reminder_id, event_id, offset_minutes, due_at, status, created_at, updated_at,
        source_partition, source_offset, source_version)
    SELECT w.reminder_id, w.event_id, w.offset_minutes, w.due_at, 'Pending', $13, $13,
           up.source_partition, up.source_offset,
           CASE WHEN up.source_partition IS NOT NULL THEN up.version END
    FROM unnest($18::uuid[], $19::uuid[], $20::int[], $21::timestamptz[])
         AS w(reminder_id, event_id, offset_minutes, due_at)
    JOIN up ON up.event_id = w.event_id
    ON CONFLICT (reminder_id) DO UPDATE SET
        status = 'Pending', skip_reason = NULL, updated_at = EXCLUDED.updated_at,
        source_partition = EXCLUDED.source_partition, source_offset = EXCLUDED.source_offset,
        source_version = EXCLUDED.source_version,
        -- wanted again = a new reminder: an earlier poison backoff does not carry over
        attempts = 0, next_attempt_at = '-infinity', last_error_code = NULL
    WHERE r.status = 'Skipped'
    RETURNING r.due_at
)
SELECT event_id, NULL::timestamptz AS due_at, NULL::bigint AS skipped FROM up
UNION ALL
SELECT NULL, due_at, NULL FROM made
UNION ALL
SELECT NULL, NULL, count(*) FROM skipped;

-- name: calendar_events_version_advance
-- States the cache believes unchanged or stale. The stored row decides, never the cache:
-- a state whose fingerprint ($4) equals the STORED one and whose Version is newer only moves
-- Version and OccurredAt forward (status 'advanced'); one not newer than the stored Version
-- is stale (status 'stale', with the stored Version and fingerprint, so the caller can
-- correct its cache). Every other state (no row, a different stored fingerprint, a stored
-- NULL fingerprint) is returned as nothing: the caller stores it with calendar_events_apply
-- in the same transaction. The 'stale' probe reads the statement's snapshot, so it never
-- sees a row the UPDATE moved here; Versions only go up, so stale stays stale.
WITH u AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::timestamptz[], $4::text[])
        AS u(event_id, version, occurred_at, fingerprint)
), advanced AS (
    UPDATE calendar.events e
    SET version = u.version, occurred_at = u.occurred_at, updated_at = $5
    FROM u
    WHERE e.event_id = u.event_id AND e.version < u.version AND e.fingerprint = u.fingerprint
    RETURNING e.event_id
)
SELECT event_id, 'advanced' AS status, NULL::bigint AS version, NULL::text AS fingerprint
FROM advanced
UNION ALL
SELECT e.event_id, 'stale', e.version, e.fingerprint
FROM calendar.events e JOIN u ON u.event_id = e.event_id
WHERE e.version >= u.version;

-- name: calendar_reminders_claim_due
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
-- calendar_reminders_due_state after the run.
-- $1 as_of, $2 batch size, $3 reminder ids to leave out (poison rows seen this run).
WITH claimed AS (
    SELECT r.reminder_id, r.event_id, r.offset_minutes, r.due_at, r.attempts,
           e.tenant_id, e.owner_user_id, e.client_user_id, e.kind, e.start_at, e.time_zone,
           e.status AS event_status, e.appointment_id
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

-- name: calendar_reminders_mark_dispatched
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

-- name: calendar_reminders_due_state
-- After a dispatch run, in one round trip: the due and still Pending rows (the seed's backlog
-- gauge; a range scan on the partial index), how many of them are claimable at $1 (not
-- backing off: left by this run, i.e. locked elsewhere or beyond its budget), the earliest
-- Pending DueAt (the oldest-due-age gauge) and the earliest time after $1 at which a Pending
-- row becomes claimable (its DueAt, or its retry time: where the dispatcher wakes next, as
-- in calendar_reminders_claim_due). $1 as_of.
SELECT b.backlog, b.ready,
       (SELECT min(due_at) FROM calendar.event_reminders WHERE status = 'Pending') AS oldest_due,
       least((SELECT min(due_at) FROM calendar.event_reminders
              WHERE status = 'Pending' AND due_at >= $1 AND attempts = 0),
             (SELECT min(greatest(due_at, next_attempt_at)) FROM calendar.event_reminders
              WHERE status = 'Pending' AND attempts > 0 AND next_attempt_at > $1)) AS next_wake
FROM (SELECT count(*) AS backlog, count(*) FILTER (WHERE next_attempt_at <= $1) AS ready
      FROM calendar.event_reminders WHERE status = 'Pending' AND due_at < $1) b;

-- name: calendar_events_count
-- How many of the given events are in the projection (demo and operators' checks).
SELECT count(*) FROM calendar.events WHERE event_id = ANY($1::uuid[]);

-- name: calendar_reminders_status_count
-- Reminder rows of the given events by status.
SELECT status, count(*) AS n FROM calendar.event_reminders
WHERE event_id = ANY($1::uuid[])
GROUP BY status;

-- name: calendar_reminders_seed
-- Bulk seeding for benchmarks and tests: $4 Planned events starting at $1 (spread by $3 ms)
-- with one Pending reminder per offset in $2. Returns how many reminder rows were made.
WITH ev AS (
                INSERT INTO calendar.events (event_id, tenant_id, owner_user_id, kind, start_at,
                    time_zone, status, reminder_offsets_minutes, version, occurred_at)
                SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'Meeting',
                       $1::timestamptz + make_interval(secs => i * $3::float8 / 1000), 'UTC',
                       'Planned', $2::int[], 1, $1::timestamptz - interval '1 day'
                FROM generate_series(1, $4::int) AS i
                RETURNING event_id, start_at, reminder_offsets_minutes
            ), ins AS (
                INSERT INTO calendar.event_reminders (reminder_id, event_id, offset_minutes, due_at)
                SELECT gen_random_uuid(), ev.event_id, o, ev.start_at - make_interval(mins => o)
                FROM ev, unnest(ev.reminder_offsets_minutes) AS o
                RETURNING 1
            ) SELECT count(*) FROM ins;

-- name: calendar_tables_analyze
-- After a bulk load (benchmarks, tests): fresh planner statistics and visibility map.
VACUUM ANALYZE calendar.events, calendar.event_reminders;

-- name: calendar_reminder_explain
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

-- name: calendar_event_explain
-- One event and the reminder ids it has (explain).
SELECT e.event_id, e.version, e.status, e.start_at, e.occurred_at, e.updated_at,
       e.source_partition, e.source_offset,
       coalesce(array_agg(r.reminder_id ORDER BY r.due_at) FILTER (WHERE r.reminder_id IS NOT NULL),
                '{}') AS reminder_ids
FROM calendar.events e
LEFT JOIN calendar.event_reminders r ON r.event_id = e.event_id
WHERE e.event_id = $1
GROUP BY e.event_id;
