-- profile.document_expiry_reminders (with profile.document_expiry_prune_horizon): the
-- expiry reminder ledger, one marker per (document, threshold).

-- name: document_expiry_reminders_check
-- Read-only, for owners ($1) a cache says are fully marked: each of their active documents
-- with ExpiresAt in [$2, $3], its DaysLeft as of $4 and how many of its crossed thresholds
-- (DaysLeft <= t, t in $5) have no marker in the ledger. Zero for every document: the owner
-- has nothing to send, and the cache's claim is confirmed by the ledger itself.
-- At most $6[i] documents of owner $1[i] (one more than its cache value names): every
-- document in the window crosses a threshold, so an owner with more documents than its
-- value names cannot be settled by it, and reading the rest of a huge owner is no use.
SELECT d.document_id, o.owner_user_id, d.expires_at - $4::date AS days_left,
       (SELECT count(*)::int
        FROM unnest($5::int[]) AS t(days)
        WHERE d.expires_at - $4::date <= t.days
          AND NOT EXISTS (
              SELECT 1 FROM profile.document_expiry_reminders r
              WHERE r.document_id = d.document_id AND r.threshold_days = t.days)) AS unmarked
FROM unnest($1::uuid[], $6::int[]) AS o(owner_user_id, most)
CROSS JOIN LATERAL (
    SELECT p.document_id, p.expires_at
    FROM profile.person_documents p
    WHERE p.owner_user_id = o.owner_user_id
      AND p.expires_at IS NOT NULL
      AND p.expires_at BETWEEN greatest($2::date, (SELECT h.pruned_before FROM profile.document_expiry_prune_horizon h)) AND $3
      AND p.status = 'Active' AND NOT p.is_deleted
    ORDER BY p.document_id
    LIMIT o.most
) d;

-- name: document_expiry_reminders_claim
-- Writes markers, then its owners' events: INSERT INTO ops.outbox (the CTE "sent", named
-- here because pg_stat_activity keeps only a statement's first 1024 bytes, and a session
-- held on the outbox is found by that text).
-- One chunk of one transaction's owners ($1): their active documents with ExpiresAt in
-- [$2, $3] after the keyset ($7 OwnerUserId, $8 DocumentId) in that order, at most $9 (so
-- no statement, however large an owner, covers more than a chunk; the caller goes on from
-- the last document it got), read without a lock; the existing markers of those documents read FOR UPDATE
-- SKIP LOCKED (a parallel instance's are passed over), every crossed threshold (DaysLeft as
-- of $4 <= t, t in $5) without a marker inserted insert-wins with RemindedAt $6; and, in the
-- same statement, each owner's DocumentExpiryReminderEvents written to the outbox: one item
-- per document whose t* this statement won, in (ExpiresAt, DocumentId) order, at most $12
-- items per event, on topic $10, keyed by OwnerUserId, RemindedAt the JSON text $11, headers
-- $13[i] for owner $1[i] (JSON text). The payload is the contract's wire form, byte for byte
-- (tests/integration/test_document_expiry_events_sql.py checks it against the contract's
-- serializer): the events never travel to the worker and back.
-- Returns each owner it covered once, in OwnerUserId order (one row per owner, not per
-- document: decoding a million rows cost the worker more than the aggregate costs here):
-- how many of its documents it covered, how many of their crossed thresholds were already
-- marked, t* of each document this statement won (its events' items, in their order), the
-- owner cache's value for these documents once marked (document=t,t;... with thresholds
-- descending, as streams/domain/profile.py encode_marks writes it), with $15 the won
-- documents as JSON [[DocumentId, Type, t*, DaysLeft], ...] for a log line (NULL without),
-- the first won document whose item breaks the contract's length rules and which field
-- ($14: Type's least and most characters, NumberMask's most; 'Type', 'NumberMask' or NULL),
-- and, the same on every row, the largest event's size in bytes (the caller compares it with
-- the contract's limit and, as for a broken item, raises before the commit) and the last
-- document covered in (OwnerUserId, DocumentId) order (a full chunk's keyset cursor).
-- Markers go in (document, threshold) order, the same in every instance, so two instances
-- inserting overlapping sets wait on each other, never deadlock.
-- A marker's id is time-ordered (ops.uuid_v7, migration 0030): its primary key and the
-- console's (reminded_at, id) index grow at their right edge, not at a random leaf each.
-- The documents are read per owner (unnest($1), a LATERAL range of the (OwnerUserId,
-- DocumentId) index from the keyset, at most $9 each): as owner_user_id = ANY($1), a plan
-- made for the parameters (each connection's first five claims) read the whole window by
-- ExpiresAt for a chunk of a few hundred owners (tests/integration/
-- test_document_expiry_claim_plan.py).
-- No join between the CTEs: a cached generic plan guesses one document (the owners are a
-- parameter) and would nest loops over thousands; a hashed IN and one GROUP BY do not care.
WITH docs AS MATERIALIZED (
    SELECT d.document_id, d.owner_user_id, d.type, d.number_mask, d.expires_at,
           d.expires_at - $4::date AS days_left
    FROM unnest($1::uuid[]) AS o(owner_user_id)
    CROSS JOIN LATERAL (
        SELECT p.document_id, p.owner_user_id, p.type, p.number_mask, p.expires_at
        FROM profile.person_documents p
        WHERE p.owner_user_id = o.owner_user_id
          AND p.document_id >= CASE WHEN o.owner_user_id = $7::uuid THEN $8::uuid
                                    ELSE '00000000-0000-0000-0000-000000000000'::uuid END
          AND (p.owner_user_id, p.document_id) > ($7::uuid, $8::uuid)
          AND p.expires_at IS NOT NULL
          AND p.expires_at BETWEEN greatest($2::date, (SELECT h.pruned_before FROM profile.document_expiry_prune_horizon h)) AND $3
          AND p.status = 'Active' AND NOT p.is_deleted
        ORDER BY p.document_id
        LIMIT $9
    ) d
    WHERE o.owner_user_id >= $7::uuid
    ORDER BY d.owner_user_id, d.document_id
    LIMIT $9
), locked AS MATERIALIZED (
    SELECT r.document_id, r.threshold_days
    FROM profile.document_expiry_reminders r
    WHERE r.document_id = ANY(ARRAY(SELECT document_id FROM docs))
    FOR UPDATE OF r SKIP LOCKED
), crossed AS MATERIALIZED (
    SELECT d.document_id, d.owner_user_id, d.type, d.number_mask, d.expires_at, d.days_left,
           t.days AS threshold_days,
           (d.document_id, t.days) IN (SELECT document_id, threshold_days FROM locked) AS marked
    FROM docs d
    CROSS JOIN unnest($5::int[]) AS t(days)
    WHERE d.days_left <= t.days
), ins AS (
    INSERT INTO profile.document_expiry_reminders AS r (
        id, document_id, owner_user_id, type, threshold_days, expires_at, reminded_at)
    SELECT ops.uuid_v7(), c.document_id, c.owner_user_id, c.type, c.threshold_days,
           c.expires_at, $6
    FROM crossed c
    WHERE NOT c.marked
    ORDER BY c.document_id, c.threshold_days
    ON CONFLICT (document_id, threshold_days) DO NOTHING
    RETURNING r.document_id, r.owner_user_id, r.threshold_days
), outcome AS (
    -- Every document of the window has a crossed row (DaysLeft <= max threshold).
    SELECT c.document_id, c.owner_user_id, c.type, c.number_mask, c.expires_at, c.days_left,
           NULL::int AS won, c.marked
    FROM crossed c
    UNION ALL
    SELECT i.document_id, i.owner_user_id, NULL, NULL, NULL, NULL, i.threshold_days, false
    FROM ins i
), claimed AS MATERIALIZED (
    SELECT o.document_id, o.owner_user_id, max(o.type) AS type,
           max(o.number_mask) AS number_mask, max(o.expires_at) AS expires_at,
           max(o.days_left) AS days_left, min(o.won) AS t_star,
           count(*) FILTER (WHERE o.marked)::int AS skipped
    FROM outcome o
    GROUP BY o.document_id, o.owner_user_id
), items AS (
    SELECT c.owner_user_id, c.document_id, c.expires_at,
           (row_number() OVER (PARTITION BY c.owner_user_id
                               ORDER BY c.expires_at, c.document_id) - 1) / $12 AS part,
           '{"DocumentId":"' || c.document_id::text
           || '","Type":' || to_json(c.type)::text
           || ',"NumberMask":' || coalesce(to_json(c.number_mask)::text, 'null')
           || ',"ExpiresAt":' || to_json(c.expires_at)::text
           || ',"ThresholdDays":' || c.t_star::text
           || ',"DaysLeft":' || c.days_left::text || '}' AS item
    FROM claimed c
    WHERE c.t_star IS NOT NULL
), events AS MATERIALIZED (
    SELECT i.owner_user_id, i.part,
           '{"ContractVersion":1,"OwnerUserId":"' || i.owner_user_id::text
           || '","RemindedAt":' || $11::text
           || ',"Documents":[' || string_agg(i.item, ',' ORDER BY i.expires_at, i.document_id)
           || ']}' AS payload
    FROM items i
    GROUP BY i.owner_user_id, i.part
), sent AS (
    INSERT INTO ops.outbox (topic, key, payload, headers)
    SELECT $10::text, e.owner_user_id::text, e.payload::json, w.headers::jsonb
    FROM events e
    JOIN unnest($1::uuid[], $13::text[]) AS w(owner_user_id, headers) USING (owner_user_id)
    ORDER BY e.owner_user_id, e.part
), marks AS (
    -- The crossed thresholds of each DaysLeft in the chunk, descending, as the owner cache's
    -- value writes them (streams/domain/profile.py encode_marks): a few dozen rows.
    SELECT l.days_left, string_agg(t.days::text, ',' ORDER BY t.days DESC) AS thresholds
    FROM (SELECT DISTINCT days_left FROM docs) l
    CROSS JOIN unnest($5::int[]) AS t(days)
    WHERE l.days_left <= t.days
    GROUP BY l.days_left
)
SELECT s.owner_user_id, count(*)::int AS documents, sum(s.skipped)::int AS skipped,
       coalesce(array_agg(s.t_star) FILTER (WHERE s.t_star IS NOT NULL), '{}') AS won,
       string_agg(s.document_id::text || '=' || s.thresholds, ';') AS marks,
       (json_agg(json_build_array(s.document_id, s.type, s.t_star, s.days_left))
            FILTER (WHERE $15 AND s.t_star IS NOT NULL))::text AS logged,
       (array_agg(s.document_id) FILTER (WHERE s.breaks IS NOT NULL))[1] AS broken_document,
       (array_agg(s.breaks) FILTER (WHERE s.breaks IS NOT NULL))[1] AS breaks,
       (SELECT max(octet_length(e.payload)) FROM events e) AS largest_event,
       (SELECT d.document_id FROM docs d
        ORDER BY d.owner_user_id DESC, d.document_id DESC LIMIT 1) AS last_document
FROM (
    -- In (ExpiresAt, DocumentId) order within each owner: the aggregates take their rows in
    -- the order their input has, so an owner's value is the same text whenever its marks are.
    SELECT c.owner_user_id, c.document_id, c.type, c.days_left, c.t_star, c.skipped,
           m.thresholds,
           CASE WHEN c.t_star IS NULL THEN NULL
                WHEN length(c.type) NOT BETWEEN ($14::int[])[1] AND ($14::int[])[2] THEN 'Type'
                WHEN length(c.number_mask) > ($14::int[])[3] THEN 'NumberMask' END AS breaks
    FROM claimed c
    JOIN marks m USING (days_left)
    ORDER BY c.owner_user_id, c.expires_at, c.document_id
) s
GROUP BY s.owner_user_id
ORDER BY s.owner_user_id;

-- name: document_expiry_reminders_prune
-- Markers of documents that expired before $1, at most $2 per call (the caller repeats),
-- and the prune horizon raised to $1 in the same transaction (never lowered: a replayed
-- day prunes below an older date), so no statement reads the window below it again.
WITH horizon AS (
    INSERT INTO profile.document_expiry_prune_horizon AS h (singleton, pruned_before)
    VALUES (true, $1)
    ON CONFLICT (singleton) DO UPDATE
    SET pruned_before = greatest(h.pruned_before, EXCLUDED.pruned_before)
), doomed AS (
    SELECT id FROM profile.document_expiry_reminders
    WHERE expires_at < $1
    ORDER BY expires_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM profile.document_expiry_reminders r USING doomed d
    WHERE r.id = d.id
    RETURNING 1
)
SELECT count(*) FROM deleted;

-- name: document_expiry_reminders_backlog_count
-- Active documents in the window [$1, $2] with a crossed threshold (DaysLeft as of $3 <= t,
-- t in $4) that has no marker yet: reminders still owed (the seed's backlog gauge). An anti
-- join of the crossed (document, threshold) pairs with the ledger: hashed (and parallel)
-- over a million documents, instead of one index probe per pair.
-- $5, after a clean run (every owner it handed out done, none failed, the scan not cut
-- short): the write horizon taken before its scan (person_documents_write_horizon), and only
-- the documents whose row a transaction at or after it wrote are checked. Every other
-- document was read by the scan as it is now, so its owner was handed out and its claim (or
-- the ledger-checked cache) left every crossed threshold marked. age() compares transaction
-- ids across wraparound (a frozen row is as old as can be), both relative to this
-- statement's transaction: a row at least as young as the horizon is checked, and one older
-- than 2^31 transactions that aliases as young is checked too (never passed over). NULL:
-- every document of the window is checked.
SELECT count(*) FROM (
    SELECT DISTINCT d.document_id
    FROM profile.person_documents d
    CROSS JOIN unnest($4::int[]) AS t(days)
    WHERE d.expires_at IS NOT NULL
      AND d.expires_at BETWEEN greatest($1::date, (SELECT h.pruned_before FROM profile.document_expiry_prune_horizon h)) AND $2
      AND d.status = 'Active' AND NOT d.is_deleted
      AND ($5::text IS NULL OR age(d.xmin) <= age($5::text::xid))
      AND d.expires_at - $3::date <= t.days
      AND NOT EXISTS (
          SELECT 1 FROM profile.document_expiry_reminders r
          WHERE r.document_id = d.document_id AND r.threshold_days = t.days)
) AS owed;

-- name: document_expiry_reminders_owners_count
-- Markers of the given owners (demo and operators' checks).
SELECT count(*) FROM profile.document_expiry_reminders WHERE owner_user_id = ANY($1::uuid[]);

-- name: document_expiry_reminders_console_page
-- The console's page of markers (one per reminder sent): (reminded_at, id) after the keyset
-- bound ($1, $2), before $3, at most $4, on ix_document_expiry_reminders_console.
SELECT id, document_id, owner_user_id, type, threshold_days, expires_at, reminded_at
FROM profile.document_expiry_reminders
WHERE (reminded_at, id) > ($1::timestamptz, $2::uuid) AND reminded_at < $3
ORDER BY reminded_at, id
LIMIT $4;

-- name: document_expiry_reminders_console_of_owner
-- The same page for one owner ($5): that owner's markers (ix_document_expiry_reminders_owner),
-- sorted; bounded by the markers of one owner.
SELECT id, document_id, owner_user_id, type, threshold_days, expires_at, reminded_at
FROM profile.document_expiry_reminders
WHERE owner_user_id = $5
  AND (reminded_at, id) > ($1::timestamptz, $2::uuid) AND reminded_at < $3
ORDER BY reminded_at, id
LIMIT $4;

-- name: document_expiry_reminders_console_get
-- One marker by id (the console's detail).
SELECT id, document_id, owner_user_id, type, threshold_days, expires_at, reminded_at
FROM profile.document_expiry_reminders
WHERE id = $1;

-- name: document_expiry_reminders_console_count
-- Markers, counted up to $1.
SELECT count(*) FROM (SELECT 1 FROM profile.document_expiry_reminders LIMIT $1) x;
