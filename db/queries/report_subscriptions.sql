-- automation.report_subscriptions: the report subscription projection (applied only when newer).

-- name: report_subscriptions_upsert
-- Report subscription states, applied only when newer.
INSERT INTO automation.report_subscriptions AS t (
    subscription_guid, business_unit_id, cron, period, active, version, updated_on)
SELECT u.subscription_guid, u.business_unit_id, u.cron, u.period, u.active, u.version, $7
FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::bool[], $6::bigint[])
     AS u(subscription_guid, business_unit_id, cron, period, active, version)
ON CONFLICT (subscription_guid) DO UPDATE SET
    business_unit_id = EXCLUDED.business_unit_id,
    cron = EXCLUDED.cron,
    period = EXCLUDED.period,
    active = EXCLUDED.active,
    version = EXCLUDED.version,
    updated_on = EXCLUDED.updated_on
WHERE t.version < EXCLUDED.version
RETURNING t.subscription_guid;

-- name: report_subscriptions_get_by_guid
-- Report subscription states by guid.
SELECT r.subscription_guid, r.business_unit_id, r.cron, r.period, r.active, r.version
FROM automation.report_subscriptions r
WHERE r.subscription_guid = ANY($1::uuid[]);

-- name: report_subscriptions_of_units
SELECT r.subscription_guid, r.business_unit_id, r.cron, r.period, r.active, r.version
FROM automation.report_subscriptions r
WHERE r.business_unit_id = ANY($1::uuid[]) AND r.active;

-- name: report_subscriptions_reconcile_page
-- Active report subscriptions of the allowed BUs after the cursor, LIMIT $3.
SELECT r.subscription_guid, r.business_unit_id, r.cron, r.period, r.active, r.version
FROM automation.report_subscriptions r
WHERE r.active AND r.business_unit_id = ANY($1::uuid[])
  AND ($2::uuid IS NULL OR r.subscription_guid > $2)
ORDER BY r.subscription_guid
LIMIT $3;
