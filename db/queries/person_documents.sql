-- profile.person_documents: the person documents projection and the expiry run's scan.

-- name: person_documents_upsert
-- Applies each document state only when its Version is newer than the stored one; returns
-- the documents that changed. Open columns only (PayloadCipher never reaches this service).
-- $12 is each state's content fingerprint, stored with it (person_documents_version_advance).
INSERT INTO profile.person_documents AS d (
    document_id, owner_user_id, person_id, type, number_mask, expires_at, status, is_deleted,
    version, occurred_at, updated_at, fingerprint)
SELECT u.document_id, u.owner_user_id, u.person_id, u.type, u.number_mask, u.expires_at,
       u.status, u.is_deleted, u.version, u.occurred_at, $11, u.fingerprint
FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::date[],
            $7::text[], $8::boolean[], $9::bigint[], $10::timestamptz[], $12::text[])
     AS u(document_id, owner_user_id, person_id, type, number_mask, expires_at, status,
          is_deleted, version, occurred_at, fingerprint)
ON CONFLICT (document_id) DO UPDATE SET
    owner_user_id = EXCLUDED.owner_user_id,
    person_id = EXCLUDED.person_id,
    type = EXCLUDED.type,
    number_mask = EXCLUDED.number_mask,
    expires_at = EXCLUDED.expires_at,
    status = EXCLUDED.status,
    is_deleted = EXCLUDED.is_deleted,
    version = EXCLUDED.version,
    occurred_at = EXCLUDED.occurred_at,
    updated_at = EXCLUDED.updated_at,
    fingerprint = EXCLUDED.fingerprint
WHERE d.version < EXCLUDED.version
RETURNING d.document_id;

-- name: person_documents_version_advance
-- States the cache believes unchanged or stale; the stored row decides, as in
-- events_version_advance: same STORED fingerprint ($4) and newer → only Version and
-- OccurredAt move ('advanced'); not newer than stored → 'stale' (with the stored Version and
-- fingerprint); anything else comes back as nothing, for person_documents_upsert.
WITH u AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::timestamptz[], $4::text[])
        AS u(document_id, version, occurred_at, fingerprint)
), advanced AS (
    UPDATE profile.person_documents d
    SET version = u.version, occurred_at = u.occurred_at, updated_at = $5
    FROM u
    WHERE d.document_id = u.document_id AND d.version < u.version
      AND d.fingerprint = u.fingerprint
    RETURNING d.document_id
)
SELECT document_id, 'advanced' AS status, NULL::bigint AS version, NULL::text AS fingerprint
FROM advanced
UNION ALL
SELECT d.document_id, 'stale', d.version, d.fingerprint
FROM profile.person_documents d JOIN u ON u.document_id = d.document_id
WHERE d.version >= u.version;

-- name: person_documents_scan
-- One batch of the run's read-only scan: active, undeleted documents with ExpiresAt in
-- [$1, $2] (the lower bound never below the prune horizon, as in every statement that reads
-- the window: markers below it are gone), in (ExpiresAt, DocumentId) order after the keyset ($3, $4), at most $5. No
-- lock: the worker never changes documents and never holds up an investor's own edit.
-- One row back: how many documents, the last one's keyset, and their owners in the order
-- of their first document (a million documents need not cross the wire one by one).
WITH batch AS (
    SELECT d.expires_at, d.document_id, d.owner_user_id,
           row_number() OVER (ORDER BY d.expires_at, d.document_id) AS n
    FROM profile.person_documents d
    WHERE d.expires_at IS NOT NULL
      AND d.expires_at BETWEEN greatest($1::date, (SELECT h.pruned_before FROM profile.document_expiry_prune_horizon h)) AND $2
      AND (d.expires_at, d.document_id) > ($3::date, $4::uuid)
      AND d.status = 'Active' AND NOT d.is_deleted
    ORDER BY d.expires_at, d.document_id
    LIMIT $5
), owners AS (
    SELECT owner_user_id, min(n) AS first FROM batch GROUP BY owner_user_id
), last AS (
    SELECT expires_at, document_id FROM batch ORDER BY n DESC LIMIT 1
)
SELECT (SELECT count(*) FROM batch)::int,
       (SELECT expires_at FROM last),
       (SELECT document_id FROM last),
       coalesce((SELECT array_agg(owner_user_id ORDER BY first) FROM owners), '{}'::uuid[]);

-- name: person_documents_write_horizon
-- Taken before the run's scan: the oldest transaction still running now (the xmin of the
-- current snapshot, as a 32-bit transaction id in text). Every document row version written
-- by an older transaction was committed before the scan began, so each batch of the scan
-- read it as it is now; a row written by this transaction or a later one may have been
-- passed over (document_expiry_reminders_backlog_count).
SELECT (pg_snapshot_xmin(pg_current_snapshot())::text::bigint % 4294967296)::text;

-- name: person_documents_owners_count
-- Documents in the projection for the given owners (demo and operators' checks).
SELECT count(*) FROM profile.person_documents WHERE owner_user_id = ANY($1::uuid[]);
