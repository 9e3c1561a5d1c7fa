-- Automation inputs (seed 003, stage ①): projections read by the event path and the bounded
-- reconciliation. Every read is by key or by (BusinessUnit, SourceType) through an index.

-- name: automation_units_lock
-- Serializes the writers of one BU (sources, settings, BU, subscriptions, reconciliation):
-- each reads the others' projections after taking the lock, so out-of-order arrival
-- converges. Transaction-scoped advisory locks, taken in BU order (no deadlock).
SELECT count(pg_advisory_xact_lock(hashtextextended('automation-bu:' || b::text, 0)))
FROM (SELECT DISTINCT b FROM unnest($1::uuid[]) AS b ORDER BY b) AS ordered;

-- name: automation_units_upsert
-- BusinessUnit states, applied only when newer.
INSERT INTO automation.business_units AS t (business_unit_id, time_zone_id, version, updated_on)
SELECT u.business_unit_id, u.time_zone_id, u.version, $4
FROM unnest($1::uuid[], $2::text[], $3::bigint[]) AS u(business_unit_id, time_zone_id, version)
ON CONFLICT (business_unit_id) DO UPDATE SET
    time_zone_id = EXCLUDED.time_zone_id,
    version = EXCLUDED.version,
    updated_on = EXCLUDED.updated_on
WHERE t.version < EXCLUDED.version
RETURNING t.business_unit_id;

-- name: automation_units_get
SELECT business_unit_id, time_zone_id, version
FROM automation.business_units
WHERE business_unit_id = ANY($1::uuid[]);

-- name: automation_settings_load
-- Full ReminderSetting states by guid.
SELECT setting_guid, business_unit_id, source_type, trigger_type, trigger_key, offsets_days,
       send_time_local, threshold_metric_key, threshold_value, threshold_comparator,
       threshold_firing_policy, active, version, recurrence, immediate_notification
FROM automation.reminder_settings
WHERE setting_guid = ANY($1::uuid[]);

-- name: automation_settings_of_units
-- Active settings of the given BUs (every SourceType); ix_reminder_settings_bu.
SELECT setting_guid, business_unit_id, source_type, trigger_type, trigger_key, offsets_days,
       send_time_local, threshold_metric_key, threshold_value, threshold_comparator,
       threshold_firing_policy, active, version, recurrence, immediate_notification
FROM automation.reminder_settings
WHERE business_unit_id = ANY($1::uuid[]) AND active;

-- name: automation_sources_load
-- Full source states by (SourceType, SourceGuid). $1 types, $2 guids (parallel).
SELECT s.source_type, s.source_guid, s.business_unit_id, s.is_active, s.attributes, s.version,
       s.occurred_at
FROM automation.sources s
JOIN unnest($1::text[], $2::uuid[]) AS k(source_type, source_guid)
  ON s.source_type = k.source_type AND s.source_guid = k.source_guid;

-- name: automation_sources_of_units
-- Active sources of (BU, SourceType) pairs; ix_sources_bu. $1 BUs, $2 types (parallel).
SELECT s.source_type, s.source_guid, s.business_unit_id, s.is_active, s.attributes, s.version,
       s.occurred_at
FROM automation.sources s
JOIN (SELECT DISTINCT * FROM unnest($1::uuid[], $2::text[])) AS k(business_unit_id, source_type)
  ON s.business_unit_id = k.business_unit_id AND s.source_type = k.source_type
WHERE s.is_active;

-- name: automation_thresholds_get
-- Threshold memory of (setting, source) triples. $1 settings, $2 types, $3 guids (parallel).
SELECT t.setting_guid, t.source_type, t.source_guid, t.met, t.met_since, t.episode
FROM automation.threshold_states t
JOIN unnest($1::uuid[], $2::text[], $3::uuid[]) AS k(setting_guid, source_type, source_guid)
  ON t.setting_guid = k.setting_guid AND t.source_type = k.source_type
 AND t.source_guid = k.source_guid;

-- name: automation_thresholds_put
INSERT INTO automation.threshold_states AS t (
    setting_guid, source_type, source_guid, met, met_since, episode, updated_on)
SELECT u.setting_guid, u.source_type, u.source_guid, u.met, u.met_since, u.episode, $7
FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::bool[], $5::timestamptz[], $6::text[])
     AS u(setting_guid, source_type, source_guid, met, met_since, episode)
ON CONFLICT (setting_guid, source_type, source_guid) DO UPDATE SET
    met = EXCLUDED.met,
    met_since = EXCLUDED.met_since,
    episode = EXCLUDED.episode,
    updated_on = EXCLUDED.updated_on;

-- name: automation_threshold_rows_dispatched
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

-- name: automation_open_rows_of_sources
-- Open (Pending/Failed) reminder rows of sources; ix_scheduler_open_source.
SELECT s.scheduler_key, s.setting_guid, s.source_type, s.source_guid
FROM automation.scheduler s
JOIN unnest($1::text[], $2::uuid[]) AS k(source_type, source_guid)
  ON s.source_type = k.source_type AND s.source_guid = k.source_guid
WHERE s.status_id IN ('Pending', 'Failed');

-- name: automation_open_rows_of_settings
-- Open (Pending/Failed) rows of settings; ix_scheduler_open_setting.
SELECT scheduler_key, setting_guid, source_type, source_guid
FROM automation.scheduler
WHERE setting_guid = ANY($1::uuid[]) AND status_id IN ('Pending', 'Failed');

-- name: automation_open_rows_of_subscriptions
-- Open (Pending/Failed) scheduled-run rows of report subscriptions.
SELECT scheduler_key, subscription_guid
FROM automation.scheduler
WHERE subscription_guid = ANY($1::uuid[]) AND status_id IN ('Pending', 'Failed')
  AND trigger_type_id = 'ScheduledRun';

-- name: automation_subscriptions_load
SELECT r.subscription_guid, r.business_unit_id, r.cron, r.period, r.active, r.version
FROM automation.report_subscriptions r
WHERE r.subscription_guid = ANY($1::uuid[]);

-- name: automation_subscriptions_of_units
SELECT r.subscription_guid, r.business_unit_id, r.cron, r.period, r.active, r.version
FROM automation.report_subscriptions r
WHERE r.business_unit_id = ANY($1::uuid[]) AND r.active;

-- name: automation_watermark_get
SELECT provider, watermark, cursor_type, cursor_guid
FROM automation.reconcile_watermarks
WHERE provider = $1;

-- name: automation_watermark_put
-- Written in the transaction of the batch it follows: it advances only if the batch commits.
INSERT INTO automation.reconcile_watermarks AS t (
    provider, watermark, cursor_type, cursor_guid, updated_on)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (provider) DO UPDATE SET
    watermark = EXCLUDED.watermark,
    cursor_type = EXCLUDED.cursor_type,
    cursor_guid = EXCLUDED.cursor_guid,
    updated_on = EXCLUDED.updated_on;

-- name: automation_reconcile_sources_page
-- One bounded reconciliation batch: active sources of the allowed BUs ($1) changed after the
-- keyset position ($2 watermark, $3 type, $4 guid) and up to $5 (now minus a settle lag), in
-- (UpdatedOn, SourceType, SourceGuid) order, LIMIT $6; ix_sources_reconcile.
SELECT s.source_type, s.source_guid, s.business_unit_id, s.is_active, s.attributes, s.version,
       s.occurred_at, s.updated_on
FROM automation.sources s
WHERE s.is_active
  AND s.business_unit_id = ANY($1::uuid[])
  AND (s.updated_on, s.source_type, s.source_guid)
      > ($2::timestamptz, $3::text, coalesce($4::uuid, '00000000-0000-0000-0000-000000000000'))
  AND s.updated_on <= $5
ORDER BY s.updated_on, s.source_type, s.source_guid
LIMIT $6;

-- name: automation_reconcile_settings_page
-- One bounded batch of the settings repair path: active reminder settings of the allowed BUs
-- ($1) changed after the keyset position ($2 watermark, $3 guid) and up to $4 (now minus the
-- settle lag), in (UpdatedOn, SettingGuid) order, LIMIT $5; ix_reminder_settings_reconcile.
SELECT r.setting_guid, r.business_unit_id, r.updated_on
FROM automation.reminder_settings r
WHERE r.active
  AND r.business_unit_id = ANY($1::uuid[])
  AND (r.updated_on, r.setting_guid)
      > ($2::timestamptz, coalesce($3::uuid, '00000000-0000-0000-0000-000000000000'))
  AND r.updated_on <= $4
ORDER BY r.updated_on, r.setting_guid
LIMIT $5;

-- name: automation_reconcile_units_page
-- One bounded batch of the business-unit (time zone) repair path: allowed BUs ($1) changed
-- after the keyset position ($2 watermark, $3 guid) and up to $4, in (UpdatedOn,
-- BusinessUnitId) order, LIMIT $5; ix_business_units_reconcile.
SELECT b.business_unit_id, b.updated_on
FROM automation.business_units b
WHERE b.business_unit_id = ANY($1::uuid[])
  AND (b.updated_on, b.business_unit_id)
      > ($2::timestamptz, coalesce($3::uuid, '00000000-0000-0000-0000-000000000000'))
  AND b.updated_on <= $4
ORDER BY b.updated_on, b.business_unit_id
LIMIT $5;

-- name: automation_reconcile_subscriptions_page
-- Active report subscriptions of the allowed BUs after the cursor, LIMIT $3.
SELECT r.subscription_guid, r.business_unit_id, r.cron, r.period, r.active, r.version
FROM automation.report_subscriptions r
WHERE r.active AND r.business_unit_id = ANY($1::uuid[])
  AND ($2::uuid IS NULL OR r.subscription_guid > $2)
ORDER BY r.subscription_guid
LIMIT $3;

-- name: automation_rows_status_count
-- Scheduler rows of the given sources by status (the demo's report).
SELECT status_id, count(*) AS n
FROM automation.scheduler
WHERE source_guid = ANY($1::uuid[])
GROUP BY status_id;
