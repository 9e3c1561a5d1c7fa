-- automation.scheduler: one row per planned reminder or run (Ensure, Deactivate, the
-- claim and its fenced finishes, stale cleanup, support, the reads of planning and
-- revalidation, retention).

-- name: scheduler_ensure
-- The seed's Ensure table for a batch of candidates, in one statement. Existing rows are
-- locked in key order (two batches cannot deadlock) and read as they are now; the outcome
-- per key is decided on that state (streams/domain/automation/rules.py: ensure_decision):
--   no row but a record in automation.scheduler_history (a Completed row retention deleted)
--   → AlreadyCompleted with its coordinates, nothing inserted (an effect is never re-created
--   after its record is gone); no row → insert; Completed → returned with its coordinates,
--   whatever its InputHash (history is never re-sent nor held); Cancelled by an operator
--   (ReasonCode ManualCancel) → OperatorCancelled, nothing written whatever the input (only
--   the console's reopen undoes it); different InputHash on a live row → support hold,
--   the candidate's hash recorded beside the row's (FailureReasonCode InputHashConflict),
--   nothing else touched; Processing → left to its claim;
--   Failed/Deactivated/Cancelled by the system → Pending again with the new schedule,
--   keeping RetryCount, NextRetryOn, failure diagnostics, dispatch coordinates and any hold;
--   Pending → schedule updated in place when it changed (a send-time change), otherwise
--   nothing written.
-- A key inserted by a concurrent transaction after this statement's snapshot, or deleted
-- (retention moving it to history) between the snapshot and the lock, comes back as 'Raced'
-- (the repository runs the statement again for those keys, on a new snapshot).
-- $1..$11 parallel arrays (one element per candidate), $12 now.
WITH c AS (
    SELECT *
    FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::date[], $6::text[],
                $7::text[], $8::uuid[], $9::text[], $10::uuid[], $11::uuid[])
         AS c(scheduler_key, automation_type_id, trigger_type_id, scheduled_on,
              scheduled_local_date, time_zone_id, input_hash, setting_guid, source_type,
              source_guid, subscription_guid)
), cur AS (
    SELECT s.scheduler_id, s.scheduler_key, s.status_id, s.status_reason_code, s.input_hash,
           s.scheduled_on, s.scheduled_local_date, s.time_zone_id, s.is_on_support_hold,
           s.conflict_input_hash, s.version, s.retry_count, s.dispatch_result_json
    FROM automation.scheduler s
    JOIN c ON c.scheduler_key = s.scheduler_key
    ORDER BY s.scheduler_key
    FOR NO KEY UPDATE OF s
), missing AS (
    -- Keys without a row to lock: a new key, a key with a history record, or a row deleted
    -- between the snapshot and the lock (only these are looked up again below).
    SELECT c.scheduler_key FROM c
    WHERE NOT EXISTS (SELECT 1 FROM cur WHERE cur.scheduler_key = c.scheduler_key)
), seen AS (
    SELECT s.scheduler_key
    FROM automation.scheduler s JOIN missing m ON m.scheduler_key = s.scheduler_key
), hist AS (
    SELECT h.scheduler_key, h.scheduler_id, h.dispatch_result_json
    FROM automation.scheduler_history h
    JOIN missing m ON m.scheduler_key = h.scheduler_key
), d AS (
    SELECT c.*, cur.scheduler_id,
           CASE
               WHEN cur.scheduler_id IS NULL AND hist.scheduler_key IS NOT NULL
                   THEN 'AlreadyCompleted'
               WHEN cur.scheduler_id IS NULL AND seen.scheduler_key IS NOT NULL THEN 'Raced'
               WHEN cur.scheduler_id IS NULL THEN 'Inserted'
               WHEN cur.status_id = 'Completed' THEN 'AlreadyCompleted'
               WHEN cur.status_id = 'Cancelled' AND cur.status_reason_code = 'ManualCancel'
                   THEN 'OperatorCancelled'
               WHEN cur.input_hash <> c.input_hash THEN 'Conflict'
               WHEN cur.status_id = 'Processing' THEN 'InFlight'
               WHEN cur.status_id IN ('Failed', 'Deactivated', 'Cancelled') THEN 'Reactivated'
               WHEN (cur.scheduled_on, cur.scheduled_local_date, cur.time_zone_id)
                    IS NOT DISTINCT FROM (c.scheduled_on, c.scheduled_local_date, c.time_zone_id)
                   THEN 'Unchanged'
               ELSE 'Updated'
           END AS outcome,
           coalesce(cur.is_on_support_hold AND cur.conflict_input_hash = c.input_hash, false)
               AS conflict_known
    FROM c
    LEFT JOIN cur ON cur.scheduler_key = c.scheduler_key
    LEFT JOIN seen ON seen.scheduler_key = c.scheduler_key
    LEFT JOIN hist ON hist.scheduler_key = c.scheduler_key
), ins AS (
    INSERT INTO automation.scheduler (
        scheduler_key, automation_type_id, trigger_type_id, scheduled_on, scheduled_local_date,
        time_zone_id, input_hash, setting_guid, source_type, source_guid, subscription_guid,
        created_on, updated_on)
    SELECT d.scheduler_key, d.automation_type_id, d.trigger_type_id, d.scheduled_on,
           d.scheduled_local_date, d.time_zone_id, d.input_hash, d.setting_guid, d.source_type,
           d.source_guid, d.subscription_guid, $12, $12
    FROM d
    WHERE d.outcome = 'Inserted'
    ORDER BY d.scheduler_key
    ON CONFLICT (scheduler_key) DO NOTHING
    RETURNING scheduler_id, scheduler_key, status_id, version, retry_count, is_on_support_hold,
              dispatch_result_json
), upd AS (
    UPDATE automation.scheduler s
    SET status_id = CASE WHEN d.outcome = 'Reactivated' THEN 'Pending' ELSE s.status_id END,
        status_reason_code = CASE WHEN d.outcome = 'Reactivated' THEN NULL
                                  ELSE s.status_reason_code END,
        scheduled_on = CASE WHEN d.outcome = 'Conflict' THEN s.scheduled_on ELSE d.scheduled_on END,
        scheduled_local_date = CASE WHEN d.outcome = 'Conflict' THEN s.scheduled_local_date
                                    ELSE d.scheduled_local_date END,
        time_zone_id = CASE WHEN d.outcome = 'Conflict' THEN s.time_zone_id ELSE d.time_zone_id END,
        is_on_support_hold = s.is_on_support_hold OR d.outcome = 'Conflict',
        conflict_input_hash = CASE WHEN d.outcome = 'Conflict' THEN d.input_hash
                                   ELSE s.conflict_input_hash END,
        failure_reason_code = CASE WHEN d.outcome = 'Conflict' THEN 'InputHashConflict'
                                   ELSE s.failure_reason_code END,
        version = s.version + 1,
        updated_on = $12
    FROM d
    WHERE s.scheduler_id = d.scheduler_id
      AND (d.outcome IN ('Reactivated', 'Updated') OR (d.outcome = 'Conflict' AND NOT d.conflict_known))
    RETURNING s.scheduler_id, s.scheduler_key, s.status_id, s.version, s.retry_count,
              s.is_on_support_hold, s.dispatch_result_json
)
-- A history record has no live row: Completed, Version and RetryCount 0, its coordinates.
SELECT coalesce(upd.scheduler_id, ins.scheduler_id, cur.scheduler_id, hist.scheduler_id)
           AS scheduler_id,
       d.scheduler_key,
       CASE WHEN d.outcome = 'Inserted' AND ins.scheduler_key IS NULL THEN 'Raced'
            ELSE d.outcome END AS outcome,
       coalesce(upd.status_id, ins.status_id, cur.status_id,
                CASE WHEN hist.scheduler_key IS NOT NULL THEN 'Completed' END) AS status_id,
       coalesce(upd.version, ins.version, cur.version, 0) AS version,
       coalesce(upd.retry_count, ins.retry_count, cur.retry_count, 0) AS retry_count,
       coalesce(upd.is_on_support_hold, ins.is_on_support_hold, cur.is_on_support_hold, false)
           AS is_on_support_hold,
       coalesce(upd.dispatch_result_json, ins.dispatch_result_json, cur.dispatch_result_json,
                hist.dispatch_result_json) AS dispatch_result_json
FROM d
LEFT JOIN ins ON ins.scheduler_key = d.scheduler_key
LEFT JOIN upd ON upd.scheduler_key = d.scheduler_key
LEFT JOIN cur ON cur.scheduler_key = d.scheduler_key
LEFT JOIN hist ON hist.scheduler_key = d.scheduler_key AND cur.scheduler_id IS NULL;

-- name: scheduler_deactivate
-- Rows that no longer hold → $3 ('Deactivated' or 'Cancelled') with a ReasonCode per key.
-- Only Pending and Failed rows change: Completed rows stay as history, a Processing row is
-- left to its claim (execution revalidates it), an inactive row keeps its first reason.
-- Diagnostics, attempts, coordinates and any hold are kept. Rows are locked in key order,
-- as Ensure locks them. Returns every key with its status after the statement and whether
-- this statement changed it (no status: no such row).
-- $1 keys, $2 reasons (parallel), $3 target status, $4 now.
WITH c AS (
    SELECT * FROM unnest($1::text[], $2::text[]) AS c(scheduler_key, reason)
), cur AS (
    SELECT s.scheduler_id, s.scheduler_key, s.status_id, s.version
    FROM automation.scheduler s
    JOIN c ON c.scheduler_key = s.scheduler_key
    ORDER BY s.scheduler_key
    FOR NO KEY UPDATE OF s
), upd AS (
    UPDATE automation.scheduler s
    SET status_id = $3, status_reason_code = c.reason, version = s.version + 1, updated_on = $4
    FROM cur JOIN c ON c.scheduler_key = cur.scheduler_key
    WHERE s.scheduler_id = cur.scheduler_id AND cur.status_id IN ('Pending', 'Failed')
    RETURNING s.scheduler_key, s.status_id, s.version
)
SELECT c.scheduler_key, coalesce(upd.status_id, cur.status_id) AS status_id,
       coalesce(upd.version, cur.version) AS version, upd.scheduler_key IS NOT NULL AS changed
FROM c
LEFT JOIN cur ON cur.scheduler_key = c.scheduler_key
LEFT JOIN upd ON upd.scheduler_key = c.scheduler_key;

-- name: scheduler_claim
-- Due rows (Pending, ScheduledOn <= now, NextRetryOn null or <= now — i.e. due_on <= now —
-- not on hold), oldest first, locked with SKIP LOCKED so concurrent claimers never take the
-- same row, become Processing with a lease (now + $3 s) and a new Version: the token every
-- later write of this claim must present. $1 now, $2 batch size, $3 lease seconds.
WITH due AS (
    SELECT scheduler_id
    FROM automation.scheduler
    WHERE status_id = 'Pending' AND NOT is_on_support_hold AND due_on <= $1
    ORDER BY due_on
    LIMIT $2
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE automation.scheduler s
SET status_id = 'Processing',
    processing_lease_expires_on = $1 + make_interval(secs => $3::float8),
    version = s.version + 1,
    updated_on = $1
FROM due
WHERE s.scheduler_id = due.scheduler_id
RETURNING s.scheduler_id, s.scheduler_key, s.automation_type_id, s.trigger_type_id,
          s.scheduled_on, s.scheduled_local_date, s.time_zone_id, s.input_hash, s.setting_guid,
          s.source_type, s.source_guid, s.subscription_guid, s.retry_count, s.due_on,
          s.processing_lease_expires_on, s.version, s.interrupted_count;

-- name: scheduler_complete_dispatch
-- Claimed rows -> Completed where Version = token (fenced rows are not returned) and the
-- completed rows' records on the outbox, in scheduler id order, in one statement.
-- $1 ids, $2 tokens, $3 DispatchResultJson texts, $4 now; $5 record scheduler ids,
-- $6..$9 topics, keys, payloads, headers JSON. Keep "INSERT INTO ops.outbox" within
-- the first 1024 bytes: pg_stat_activity shows no more, and tests find a held batch by it.
WITH done AS (
    UPDATE automation.scheduler s
    SET status_id = 'Completed', processing_lease_expires_on = NULL,
        dispatch_result_json = c.result::jsonb, version = s.version + 1, updated_on = $4
    FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS c(scheduler_id, token, result)
    WHERE s.scheduler_id = c.scheduler_id AND s.version = c.token AND s.status_id = 'Processing'
    RETURNING s.scheduler_id
), queued AS (
    INSERT INTO ops.outbox (topic, key, payload, headers)
    SELECT o.topic, o.key, o.payload::json, o.headers::jsonb
    FROM unnest($5::bigint[], $6::text[], $7::text[], $8::text[], $9::text[])
        AS o(scheduler_id, topic, key, payload, headers)
    JOIN done d ON d.scheduler_id = o.scheduler_id
    ORDER BY o.scheduler_id
    RETURNING 1
)
SELECT d.scheduler_id, (SELECT count(*) FROM queued)::int AS queued FROM done d;

-- name: scheduler_retire
-- Claimed rows that revalidation found no longer valid → Deactivated with the ReasonCode
-- (an outcome, not a failure), only WHERE Version = token. $1 ids, $2 tokens, $3 reasons, $4 now.
UPDATE automation.scheduler s
SET status_id = 'Deactivated',
    status_reason_code = c.reason,
    processing_lease_expires_on = NULL,
    version = s.version + 1,
    updated_on = $4
FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS c(scheduler_id, token, reason)
WHERE s.scheduler_id = c.scheduler_id AND s.version = c.token AND s.status_id = 'Processing'
RETURNING s.scheduler_id;

-- name: scheduler_retry
-- Claimed rows back from Processing: a failed attempt, an interrupted claim (handed back by
-- the runner or found with an expired lease) or a hold, as the backoff ladder or the
-- interruption allowance planned it (status, RetryCount, NextRetryOn, hold), with the failure
-- reason, a value-free error and a conflict hash where given, and the interruption count of
-- an interrupted claim (NULL: not an interruption, count kept); only WHERE Version = token.
-- $1 ids, $2 tokens, $3 statuses, $4 retry counts, $5 next retry, $6 hold, $7 reason codes,
-- $8 errors, $9 conflict hashes, $10 interruption counts (parallel), $11 now.
UPDATE automation.scheduler s
SET status_id = c.status,
    retry_count = c.retry_count,
    next_retry_on = c.next_retry_on,
    is_on_support_hold = s.is_on_support_hold OR c.hold,
    failure_reason_code = coalesce(c.reason, s.failure_reason_code),
    last_error = coalesce(c.error, s.last_error),
    conflict_input_hash = coalesce(c.conflict_hash, s.conflict_input_hash),
    interrupted_count = coalesce(c.interrupted_count, s.interrupted_count),
    last_interrupted_on = CASE WHEN c.interrupted_count IS NULL THEN s.last_interrupted_on
                               ELSE $11 END,
    processing_lease_expires_on = NULL,
    version = s.version + 1,
    updated_on = $11
FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::int[], $5::timestamptz[], $6::bool[],
            $7::text[], $8::text[], $9::text[], $10::int[])
     AS c(scheduler_id, token, status, retry_count, next_retry_on, hold, reason, error,
          conflict_hash, interrupted_count)
WHERE s.scheduler_id = c.scheduler_id AND s.version = c.token AND s.status_id = 'Processing'
RETURNING s.scheduler_id;

-- name: scheduler_lock_stale
-- Processing rows whose lease expired (their claimant crashed, stalled or could not hand them
-- back), locked for this cleanup transaction; their current Version is the token of the rescue write.
-- $1 now, $2 batch size.
SELECT scheduler_id, scheduler_key, automation_type_id, retry_count, interrupted_count, version
FROM automation.scheduler
WHERE status_id = 'Processing' AND processing_lease_expires_on < $1
ORDER BY processing_lease_expires_on
LIMIT $2
FOR NO KEY UPDATE SKIP LOCKED;

-- name: scheduler_backlog_stats
-- Gauges after a run, each an index range scan: due and claimable rows, the earliest
-- claimable due_on (the oldest due row when in the past, the next wake-up otherwise),
-- rows on support hold and rows in flight. $1 now.
SELECT
    (SELECT count(*) FROM automation.scheduler
     WHERE status_id = 'Pending' AND NOT is_on_support_hold AND due_on <= $1) AS due_backlog,
    (SELECT min(due_on) FROM automation.scheduler
     WHERE status_id = 'Pending' AND NOT is_on_support_hold) AS earliest_due_on,
    (SELECT count(*) FROM automation.scheduler WHERE is_on_support_hold) AS on_hold,
    (SELECT count(*) FROM automation.scheduler WHERE status_id = 'Processing') AS processing;

-- name: scheduler_list_held
-- Rows on support hold, most recently changed first (the support view). $1 limit.
SELECT scheduler_id, scheduler_key, automation_type_id, trigger_type_id, status_id,
       status_reason_code,
       failure_reason_code, last_error, retry_count, next_retry_on, scheduled_on, input_hash,
       conflict_input_hash, is_on_support_hold, dispatch_result_json, support_action,
       support_action_on, support_action_count, interrupted_count, version, updated_on
FROM automation.scheduler
WHERE is_on_support_hold
ORDER BY updated_on DESC, scheduler_key
LIMIT $1;

-- name: scheduler_get_by_key
-- One row by SchedulerKey (support commands). $1 key.
SELECT scheduler_id, scheduler_key, automation_type_id, trigger_type_id, status_id,
       status_reason_code,
       failure_reason_code, last_error, retry_count, next_retry_on, scheduled_on, input_hash,
       conflict_input_hash, is_on_support_hold, dispatch_result_json, support_action,
       support_action_on, support_action_count, interrupted_count, version, updated_on
FROM automation.scheduler
WHERE scheduler_key = $1;

-- name: scheduler_release
-- Support puts a held row back: the hold is lifted; a Failed row (ladder exhausted) becomes
-- Pending; a Pending or Failed row is due again now (NextRetryOn cleared); $3 resets the
-- attempts and the interruption allowance (retry-key) or keeps them (release). The action, when and how many are recorded
-- in the row; the failure diagnostics and any conflict hash stay as history.
-- $1 key, $2 action, $3 reset attempts, $4 now.
UPDATE automation.scheduler s
SET is_on_support_hold = false,
    status_id = CASE WHEN s.status_id = 'Failed' THEN 'Pending' ELSE s.status_id END,
    next_retry_on = CASE WHEN s.status_id IN ('Failed', 'Pending') THEN NULL
                         ELSE s.next_retry_on END,
    retry_count = CASE WHEN $3 THEN 0 ELSE s.retry_count END,
    interrupted_count = CASE WHEN $3 THEN 0 ELSE s.interrupted_count END,
    support_action = $2,
    support_action_on = $4,
    support_action_count = s.support_action_count + 1,
    version = s.version + 1,
    updated_on = $4
WHERE s.scheduler_key = $1 AND s.is_on_support_hold
RETURNING s.scheduler_id, s.scheduler_key, s.automation_type_id, s.trigger_type_id, s.status_id,
          s.status_reason_code, s.failure_reason_code, s.last_error, s.retry_count,
          s.next_retry_on, s.scheduled_on, s.input_hash, s.conflict_input_hash,
          s.is_on_support_hold, s.dispatch_result_json, s.support_action, s.support_action_on,
          s.support_action_count, s.interrupted_count, s.version, s.updated_on;

-- name: scheduler_dispatched_of_thresholds
-- ThresholdCondition rows of (setting, source) pairs already dispatched (Processing or
-- Completed), whatever their threshold value: the value-free firing policies (OncePerSource,
-- FalseToTrue) fire once for them. $1 settings, $2 types, $3 guids (parallel);
-- ix_scheduler_threshold_dispatched.
SELECT s.setting_guid, s.source_type, s.source_guid, s.scheduler_key
FROM automation.scheduler s
JOIN unnest($1::uuid[], $2::text[], $3::uuid[]) AS k(setting_guid, source_type, source_guid)
  ON s.setting_guid = k.setting_guid AND s.source_type = k.source_type
 AND s.source_guid = k.source_guid
WHERE s.trigger_type_id = 'ThresholdCondition' AND s.status_id IN ('Processing', 'Completed');

-- name: scheduler_open_of_sources
-- Open (Pending/Failed) reminder rows of sources; ix_scheduler_open_source.
SELECT s.scheduler_key, s.setting_guid, s.source_type, s.source_guid
FROM automation.scheduler s
JOIN unnest($1::text[], $2::uuid[]) AS k(source_type, source_guid)
  ON s.source_type = k.source_type AND s.source_guid = k.source_guid
WHERE s.status_id IN ('Pending', 'Failed');

-- name: scheduler_open_of_settings
-- Open (Pending/Failed) rows of settings; ix_scheduler_open_setting_source.
SELECT scheduler_key, setting_guid, source_type, source_guid
FROM automation.scheduler
WHERE setting_guid = ANY($1::uuid[]) AND status_id IN ('Pending', 'Failed');

-- name: scheduler_open_of_subscriptions
-- Open (Pending/Failed) scheduled-run rows of report subscriptions.
SELECT scheduler_key, subscription_guid
FROM automation.scheduler
WHERE subscription_guid = ANY($1::uuid[]) AND status_id IN ('Pending', 'Failed')
  AND trigger_type_id = 'ScheduledRun';

-- name: scheduler_status_count
-- Scheduler rows of the given sources by status (the demo's report).
SELECT status_id, count(*) AS n
FROM automation.scheduler
WHERE source_guid = ANY($1::uuid[])
GROUP BY status_id;

-- name: scheduler_prune
-- Up to $2 scheduler rows retention may delete (ix_scheduler_prunable's predicate:
-- Deactivated, Cancelled by the system, or Completed of a dated trigger) that were scheduled
-- and last changed before $1. Pending, Processing and Failed rows are live work, an
-- operator's cancel (ManualCancel) is a decision only the console undoes: never deleted.
-- Each Completed row leaves its record in automation.scheduler_history in the same
-- statement (Ensure consults it: the key is never inserted again).
WITH doomed AS (
    SELECT scheduler_id FROM automation.scheduler
    WHERE (status_id = 'Deactivated'
           OR (status_id = 'Cancelled' AND status_reason_code IS DISTINCT FROM 'ManualCancel')
           OR (status_id = 'Completed'
               AND trigger_type_id IN ('DateBased', 'Recurring', 'ScheduledRun')))
      AND scheduled_on < $1
      AND updated_on < $1
    ORDER BY scheduled_on
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM automation.scheduler s USING doomed d
    WHERE s.scheduler_id = d.scheduler_id
    RETURNING s.scheduler_key, s.scheduler_id, s.status_id, s.scheduled_on, s.updated_on,
              s.dispatch_result_json
), kept AS (
    INSERT INTO automation.scheduler_history (scheduler_key, scheduler_id, scheduled_on,
                                              completed_on, dispatch_result_json)
    SELECT scheduler_key, scheduler_id, scheduled_on, updated_on, dispatch_result_json
    FROM deleted
    WHERE status_id = 'Completed'
    ORDER BY scheduler_key
    ON CONFLICT (scheduler_key) DO UPDATE
        SET scheduler_id = EXCLUDED.scheduler_id, scheduled_on = EXCLUDED.scheduled_on,
            completed_on = EXCLUDED.completed_on,
            dispatch_result_json = EXCLUDED.dispatch_result_json
)
SELECT count(*) FROM deleted;

-- name: scheduler_history_get
-- The record retention left of a Completed row (support's show of a pruned key). $1 key.
SELECT scheduler_key, scheduler_id, scheduled_on, completed_on, dispatch_result_json
FROM automation.scheduler_history
WHERE scheduler_key = $1;

-- name: scheduler_open_of_setting_range
-- Open (Pending/Failed) rows of a setting ($1) whose SourceGuid is in [$2, $3]: one chunk of
-- its fan-out; ix_scheduler_open_setting_source.
SELECT scheduler_key, setting_guid, source_type, source_guid
FROM automation.scheduler
WHERE setting_guid = $1 AND status_id IN ('Pending', 'Failed')
  AND source_guid >= $2 AND source_guid <= $3;

-- name: scheduler_open_of_setting_unsourced
-- Open rows of a setting ($1) that name no source (planned with its fan-out's first chunk).
SELECT scheduler_key, setting_guid, source_type, source_guid
FROM automation.scheduler
WHERE setting_guid = $1 AND status_id IN ('Pending', 'Failed') AND source_guid IS NULL;
