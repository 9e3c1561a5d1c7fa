-- automation.sources: the source entity projection (applied only when newer).

-- name: sources_upsert
-- Source entity states (attributes as JSON text), applied only when newer.
INSERT INTO automation.sources AS t (
    source_type, source_guid, business_unit_id, is_active, attributes, version, occurred_at,
    updated_on)
SELECT u.source_type, u.source_guid, u.business_unit_id, u.is_active, u.attributes::jsonb,
       u.version, u.occurred_at, $8
FROM unnest($1::text[], $2::uuid[], $3::uuid[], $4::bool[], $5::text[], $6::bigint[],
            $7::timestamptz[])
     AS u(source_type, source_guid, business_unit_id, is_active, attributes, version,
          occurred_at)
ON CONFLICT (source_type, source_guid) DO UPDATE SET
    business_unit_id = EXCLUDED.business_unit_id,
    is_active = EXCLUDED.is_active,
    attributes = EXCLUDED.attributes,
    version = EXCLUDED.version,
    occurred_at = EXCLUDED.occurred_at,
    updated_on = EXCLUDED.updated_on
WHERE t.version < EXCLUDED.version
RETURNING t.source_type, t.source_guid;

-- name: sources_get_by_key
-- Source states by (SourceType, SourceGuid). $1 types, $2 guids (parallel).
SELECT s.source_type, s.source_guid, s.business_unit_id, s.is_active, s.attributes, s.version,
       s.occurred_at
FROM automation.sources s
JOIN unnest($1::text[], $2::uuid[]) AS k(source_type, source_guid)
  ON s.source_type = k.source_type AND s.source_guid = k.source_guid;

-- name: sources_of_units
-- Active sources of (BU, SourceType) pairs; ix_sources_bu_guid. $1 BUs, $2 types (parallel).
SELECT s.source_type, s.source_guid, s.business_unit_id, s.is_active, s.attributes, s.version,
       s.occurred_at
FROM automation.sources s
JOIN (SELECT DISTINCT * FROM unnest($1::uuid[], $2::text[])) AS k(business_unit_id, source_type)
  ON s.business_unit_id = k.business_unit_id AND s.source_type = k.source_type
WHERE s.is_active;

-- name: sources_reconcile_page
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

-- name: sources_of_unit_range
-- One chunk of a setting's fan-out: active sources of a (BU $1, SourceType $2) from SourceGuid
-- $3 on (inclusive), in SourceGuid order, LIMIT $4; ix_sources_bu_guid.
SELECT s.source_type, s.source_guid, s.business_unit_id, s.is_active, s.attributes, s.version,
       s.occurred_at
FROM automation.sources s
WHERE s.business_unit_id = $1 AND s.source_type = $2 AND s.is_active AND s.source_guid >= $3
ORDER BY s.source_guid
LIMIT $4;
