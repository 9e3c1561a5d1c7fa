-- automation.business_units: the BusinessUnit projection (time zones) and the per-BU
-- writer lock.

-- name: business_units_lock
-- Serializes the writers of one BU (sources, settings, BU, subscriptions, reconciliation):
-- each reads the others' projections after taking the lock, so out-of-order arrival
-- converges. Transaction-scoped advisory locks, taken in BU order (no deadlock).
SELECT count(pg_advisory_xact_lock(hashtextextended('automation-bu:' || b::text, 0)))
FROM (SELECT DISTINCT b FROM unnest($1::uuid[]) AS b ORDER BY b) AS ordered;

-- name: business_units_upsert
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

-- name: business_units_get_by_id
SELECT business_unit_id, time_zone_id, version
FROM automation.business_units
WHERE business_unit_id = ANY($1::uuid[]);

-- name: business_units_reconcile_page
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
