-- automation.scheduler as the operators' console reads it (streams/console): pages by
-- status in (scheduled_on, scheduler_id) keyset order, one row, counts. Apart from
-- scheduler.sql, which holds the hot path's statements.

-- name: scheduler_console_page
-- Rows of status $5: (scheduled_on, scheduler_id) after the keyset bound ($1, $2), before
-- $3, at most $4, on ix_scheduler_console.
SELECT s.scheduler_id, s.scheduler_key, s.automation_type_id, s.trigger_type_id, s.status_id,
       s.status_reason_code, s.scheduled_on, s.due_on, s.retry_count, s.next_retry_on,
       s.failure_reason_code, s.last_error, s.is_on_support_hold, s.setting_guid,
       s.source_type, s.source_guid, s.subscription_guid, s.version, s.updated_on
FROM automation.scheduler s
WHERE s.status_id = $5
  AND (s.scheduled_on, s.scheduler_id) > ($1::timestamptz, $2::bigint) AND s.scheduled_on < $3
ORDER BY s.scheduled_on, s.scheduler_id
LIMIT $4;

-- name: scheduler_console_page_by_key_prefix
-- As scheduler_console_page, of the rows whose SchedulerKey starts with a prefix: the byte
-- range [$6, $7) of ix_scheduler_console_key (the caller computes $7, the first string past
-- the prefix), or ix_scheduler_console with the range as a filter when the prefix matches
-- most rows (the statement is planned for its values: streams/console/rows.py).
SELECT s.scheduler_id, s.scheduler_key, s.automation_type_id, s.trigger_type_id, s.status_id,
       s.status_reason_code, s.scheduled_on, s.due_on, s.retry_count, s.next_retry_on,
       s.failure_reason_code, s.last_error, s.is_on_support_hold, s.setting_guid,
       s.source_type, s.source_guid, s.subscription_guid, s.version, s.updated_on
FROM automation.scheduler s
WHERE s.status_id = $5
  AND s.scheduler_key COLLATE "C" >= $6 AND s.scheduler_key COLLATE "C" < $7
  AND (s.scheduled_on, s.scheduler_id) > ($1::timestamptz, $2::bigint) AND s.scheduled_on < $3
ORDER BY s.scheduled_on, s.scheduler_id
LIMIT $4;

-- name: scheduler_console_page_by_business_unit
-- As scheduler_console_page, of the rows of business unit $6: its reminder settings and report
-- subscriptions (ix_reminder_settings_bu, ix_report_subscriptions_bu), each one's first $4
-- rows on ix_scheduler_console_owner, then the first $4 of those. $7, $8: a SchedulerKey
-- prefix range as in scheduler_console_page_by_key_prefix (NULL, NULL: any key), checked
-- within each setting's rows. The work is bounded by the unit's settings, not the table.
WITH owners AS (
    SELECT setting_guid AS guid FROM automation.reminder_settings WHERE business_unit_id = $6
    UNION ALL
    SELECT subscription_guid FROM automation.report_subscriptions WHERE business_unit_id = $6
)
SELECT p.* FROM owners o
CROSS JOIN LATERAL (
    SELECT s.scheduler_id, s.scheduler_key, s.automation_type_id, s.trigger_type_id, s.status_id,
           s.status_reason_code, s.scheduled_on, s.due_on, s.retry_count, s.next_retry_on,
           s.failure_reason_code, s.last_error, s.is_on_support_hold, s.setting_guid,
           s.source_type, s.source_guid, s.subscription_guid, s.version, s.updated_on
    FROM automation.scheduler s
    WHERE coalesce(s.setting_guid, s.subscription_guid) = o.guid
      AND s.status_id = $5
      AND (s.scheduled_on, s.scheduler_id) > ($1::timestamptz, $2::bigint)
      AND s.scheduled_on < $3
      AND ($7::text IS NULL OR (s.scheduler_key COLLATE "C" >= $7
                                AND s.scheduler_key COLLATE "C" < $8::text))
    ORDER BY s.scheduled_on, s.scheduler_id
    LIMIT $4
) p
ORDER BY p.scheduled_on, p.scheduler_id
LIMIT $4;

-- name: scheduler_console_on_hold
-- Rows on support hold (any status), as scheduler_console_page with $5 the key prefix and
-- $6 the business unit; few (a support queue), read through ix_scheduler_on_hold and
-- filtered row by row: bounded by the rows on hold, not the table.
SELECT s.scheduler_id, s.scheduler_key, s.automation_type_id, s.trigger_type_id, s.status_id,
       s.status_reason_code, s.scheduled_on, s.due_on, s.retry_count, s.next_retry_on,
       s.failure_reason_code, s.last_error, s.is_on_support_hold, s.setting_guid,
       s.source_type, s.source_guid, s.subscription_guid, s.version, s.updated_on
FROM automation.scheduler s
WHERE s.is_on_support_hold
  AND (s.scheduled_on, s.scheduler_id) > ($1::timestamptz, $2::bigint) AND s.scheduled_on < $3
  AND ($5::text IS NULL OR starts_with(s.scheduler_key, $5))
  AND ($6::uuid IS NULL
       OR EXISTS (SELECT 1 FROM automation.reminder_settings rs
                  WHERE rs.setting_guid = s.setting_guid AND rs.business_unit_id = $6)
       OR EXISTS (SELECT 1 FROM automation.report_subscriptions rs
                  WHERE rs.subscription_guid = s.subscription_guid AND rs.business_unit_id = $6))
ORDER BY s.scheduled_on, s.scheduler_id
LIMIT $4;

-- name: scheduler_console_get
-- One row by SchedulerId, every column (the console's detail).
SELECT scheduler_id, scheduler_key, automation_type_id, trigger_type_id, status_id,
       status_reason_code, scheduled_on, scheduled_local_date, time_zone_id, due_on,
       processing_lease_expires_on, retry_count, next_retry_on, failure_reason_code,
       last_error, is_on_support_hold, input_hash, conflict_input_hash,
       dispatch_result_json::text AS dispatch_result_json, setting_guid, source_type,
       source_guid, subscription_guid, support_action, support_action_on,
       support_action_count, interrupted_count, last_interrupted_on, version, created_on,
       updated_on
FROM automation.scheduler
WHERE scheduler_id = $1;

-- name: scheduler_console_counts
-- Rows by console state, each counted up to $1 (ix_scheduler_console per status, the hold
-- index for OnHold).
SELECT st AS state, (SELECT count(*) FROM (SELECT 1 FROM automation.scheduler
                     WHERE status_id = st LIMIT $1) x) AS n
FROM unnest(ARRAY['Pending', 'Processing', 'Completed', 'Failed', 'Deactivated',
                  'Cancelled']) AS st
UNION ALL
SELECT 'OnHold', (SELECT count(*) FROM (SELECT 1 FROM automation.scheduler
                  WHERE is_on_support_hold LIMIT $1) x);
