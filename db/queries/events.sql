-- calendar.events with its retention tables calendar.event_tombstones and
-- calendar.event_prune_horizon: the events projection (and the reminder rows an event
-- state makes), seeding, explain, retention. Retention runs one bounded batch per
-- statement (the caller repeats until a batch is short), SKIP LOCKED so two runs, or a
-- run and the live path, never wait on each other.

-- name: events_apply
-- One batch of event states in one statement. Each state is stored only when its Version
-- is newer than the stored one (stale and replayed states change nothing). For the events
-- stored, and only those: their Pending reminders that the new state no longer wants become
-- Skipped with the reason the domain gives for that event ($16, one per event of $1), and
-- the reminders it wants and may create ($18..$21, already filtered by the domain) are
-- inserted, a Skipped one wanted again (e.g. rescheduled back) becoming Pending again; Sent
-- rows are history and never change, nor does a row an operator cancelled (skip_reason
-- 'ManualCancel': a reminder's meaning is its identity, so an input wanting the same row
-- again does not undo the operator's decision; only the console's reopen does). Wanted = $18 plus $17 (wanted, but already due when
-- the change happened: kept if they exist, never created). The two reminder changes touch
-- disjoint rows (wanted vs not wanted).
-- The input message (partition, offset, Version) is kept for explain, on the event and on
-- the reminders it creates (taken from the stored event: one value per event on the wire).
-- Only an event that was stored before can have reminders to skip (a reminder needs its
-- event, by foreign key): the probe is for updated events, not inserted ones (xmax = 0 on
-- the row an INSERT ... ON CONFLICT inserted; the updated row carries its updater's lock).
-- Offsets come as an array literal ($9: '{15,60}', sorted and distinct). $22 is each state's
-- content fingerprint, stored with it (events_version_advance compares it). $23 is each
-- state's input trace context (a W3C traceparent, or NULL: tracing off, or none on the
-- input), which the dispatch claim reads so the reminder's output continues that trace.
-- An event retention pruned is stored again only for a Version newer than its tombstone.
-- Returns one row: the stored events' ids (as text, the key the caller keys its batch on),
-- how many reminders were made Pending and the earliest of their DueAt (to wake the
-- dispatcher), and how many were Skipped.
WITH up AS (
    INSERT INTO calendar.events AS e (
        event_id, tenant_id, owner_user_id, client_user_id, kind, start_at, time_zone, status,
        reminder_offsets_minutes, appointment_id, version, occurred_at, updated_at,
        source_partition, source_offset, fingerprint, source_traceparent)
    SELECT u.event_id, u.tenant_id, u.owner_user_id, u.client_user_id, u.kind, u.start_at,
           u.time_zone, u.status,
           u.offsets::int[],
           u.appointment_id, u.version, u.occurred_at, $13, u.source_partition, u.source_offset,
           u.fingerprint, u.traceparent
    FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[], $6::timestamptz[],
                $7::text[], $8::text[], $9::text[], $10::uuid[], $11::bigint[],
                $12::timestamptz[], $14::int[], $15::bigint[], $22::text[], $23::text[])
         AS u(event_id, tenant_id, owner_user_id, client_user_id, kind, start_at, time_zone,
              status, offsets, appointment_id, version, occurred_at, source_partition,
              source_offset, fingerprint, traceparent)
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
        fingerprint = EXCLUDED.fingerprint,
        source_traceparent = EXCLUDED.source_traceparent
    WHERE e.version < EXCLUDED.version
    RETURNING e.event_id, e.version, e.source_partition, e.source_offset,
              e.xmax = 0 AS inserted
), skipped AS (
    -- Operator-cancelled rows are scanned too, and left as they are: a console reopen that
    -- held the event (FOR SHARE) when this statement began commits a Pending row this
    -- statement's snapshot still sees cancelled; the update re-reads the row it waited for
    -- and skips it if the new state does not want it (else it would be sent).
    UPDATE calendar.event_reminders r
    SET status = 'Skipped',
        skip_reason = CASE WHEN r.status = 'Pending' THEN c.reason ELSE r.skip_reason END,
        updated_at = CASE WHEN r.status = 'Pending' THEN $13 ELSE r.updated_at END
    FROM unnest($1::uuid[], $16::text[]) AS c(event_id, reason)
    WHERE (r.status = 'Pending' OR (r.status = 'Skipped' AND r.skip_reason = 'ManualCancel'))
      AND r.event_id = c.event_id
      AND c.event_id IN (SELECT event_id FROM up WHERE NOT inserted)
      AND r.reminder_id <> ALL($17::uuid[])
      AND r.reminder_id <> ALL($18::uuid[])
    RETURNING r.reminder_id, r.skip_reason
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
    -- A pruned event's rows are gone, not its history: a reminder due before the prune is
    -- never made again (a newer Version that happened before a deleted row's DueAt would
    -- re-send a Sent row or revive an operator's cancel).
    WHERE NOT EXISTS (
        SELECT 1 FROM calendar.event_tombstones t
        WHERE t.event_id = w.event_id AND w.due_at < t.pruned_at)
    ON CONFLICT (reminder_id) DO UPDATE SET
        status = 'Pending', skip_reason = NULL, updated_at = EXCLUDED.updated_at,
        source_partition = EXCLUDED.source_partition, source_offset = EXCLUDED.source_offset,
        source_version = EXCLUDED.source_version,
        -- wanted again = a new reminder: an earlier poison backoff does not carry over
        attempts = 0, next_attempt_at = '-infinity', last_error_code = NULL
    -- An operator's cancel is terminal: only the console's reopen undoes it.
    WHERE r.status = 'Skipped' AND r.skip_reason IS DISTINCT FROM 'ManualCancel'
    RETURNING r.due_at
)
SELECT (SELECT array_agg(event_id::text) FROM up) AS applied,
       m.made, m.earliest_due,
       (SELECT count(*) FROM skipped WHERE skip_reason <> 'ManualCancel') AS skipped
FROM (SELECT count(*) AS made, min(due_at) AS earliest_due FROM made) AS m;

-- name: events_version_advance
-- States the cache believes unchanged or stale. The stored row decides, never the cache:
-- a state whose fingerprint ($4) equals the STORED one and whose Version is newer only moves
-- Version and OccurredAt forward (status 'advanced'); one not newer than the stored Version
-- is stale (status 'stale', with the stored Version and fingerprint, so the caller can
-- correct its cache). Every other state (no row, a different stored fingerprint, a stored
-- NULL fingerprint) is returned as nothing: the caller stores it with events_apply
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

-- name: events_count
-- How many of the given events are in the projection (demo and operators' checks).
SELECT count(*) FROM calendar.events WHERE event_id = ANY($1::uuid[]);

-- name: events_seed
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

-- name: events_analyze
-- After a bulk load (benchmarks, tests): fresh planner statistics and visibility map.
VACUUM ANALYZE calendar.events, calendar.event_reminders;

-- name: events_explain
-- One event and the reminder ids it has (explain).
SELECT e.event_id, e.version, e.status, e.start_at, e.occurred_at, e.updated_at,
       e.source_partition, e.source_offset,
       coalesce(array_agg(r.reminder_id ORDER BY r.due_at) FILTER (WHERE r.reminder_id IS NOT NULL),
                '{}') AS reminder_ids
FROM calendar.events e
LEFT JOIN calendar.event_reminders r ON r.event_id = e.event_id
WHERE e.event_id = $1
GROUP BY e.event_id;

-- name: events_prune
-- Up to $2 events that started before $1 and have no Pending reminder (a poison row backing
-- off is still live work): their reminders and the events are deleted, and each leaves a
-- tombstone of its Version (pruned at $3) that events_apply checks. The event row
-- is locked first (FOR UPDATE: an ingest writing the event waits or is passed over), so a
-- new Version cannot slip in between the tombstone and the delete.
WITH doomed AS (
    SELECT e.event_id, e.version, e.occurred_at
    FROM calendar.events e
    WHERE e.start_at < $1
      AND NOT EXISTS (
          SELECT 1 FROM calendar.event_reminders r
          WHERE r.event_id = e.event_id AND r.status = 'Pending')
    ORDER BY e.start_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), tombstoned AS (
    INSERT INTO calendar.event_tombstones AS t (event_id, version, occurred_at, pruned_at)
    SELECT event_id, version, occurred_at, $3 FROM doomed
    ON CONFLICT (event_id) DO UPDATE SET
        version = GREATEST(t.version, EXCLUDED.version),
        occurred_at = GREATEST(t.occurred_at, EXCLUDED.occurred_at),
        pruned_at = EXCLUDED.pruned_at
    RETURNING 1
), reminders AS (
    DELETE FROM calendar.event_reminders r USING doomed d
    WHERE r.event_id = d.event_id
    RETURNING 1
), events AS (
    DELETE FROM calendar.events e USING doomed d
    WHERE e.event_id = d.event_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM events) AS events,
       (SELECT count(*) FROM reminders) AS reminders,
       (SELECT count(*) FROM tombstoned) AS tombstones;

-- name: events_tombstones_prune
-- Up to $2 tombstones written before $1 are deleted, and the prune horizon is raised (never
-- lowered) to the latest OccurredAt they held, in the same statement: from then on an input
-- that happened before the horizon is stale.
WITH doomed AS (
    SELECT event_id FROM calendar.event_tombstones
    WHERE pruned_at < $1
    ORDER BY pruned_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM calendar.event_tombstones t USING doomed d
    WHERE t.event_id = d.event_id
    RETURNING t.occurred_at
), raised AS (
    INSERT INTO calendar.event_prune_horizon AS h (singleton, occurred_before)
    SELECT true, max(occurred_at) FROM deleted HAVING count(*) > 0
    ON CONFLICT (singleton) DO UPDATE SET
        occurred_before = GREATEST(h.occurred_before, EXCLUDED.occurred_before)
    RETURNING 1
)
SELECT count(*) FROM deleted;
