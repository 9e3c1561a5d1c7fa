-- Statements on ops.outbox: the writer's insert, the relay's lane claim/publish, retention.
-- Lanes are 0..63: the table's generated column is (hashtext(key) & 63), see migration 0001.

-- name: outbox_insert_many
-- One statement for any number of records; ORDER BY ord makes ids follow the input order,
-- which is what keeps per-key order for records written in one call.
INSERT INTO ops.outbox (topic, key, payload, headers)
SELECT r.topic, r.key, r.payload::json, r.headers::jsonb
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])
    WITH ORDINALITY AS r(topic, key, payload, headers, ord)
ORDER BY r.ord
RETURNING id;

-- name: outbox_lanes_lock
-- Lanes with unpublished rows that this transaction could lock ($1 = lock space,
-- $2 = lanes to leave alone, $3 = most lanes to take), the lane whose oldest row has
-- waited longest first: a pass takes only some lanes, and a lane passed over must not be
-- passed over again by chance (that is a reminder's lateness). Another relay skips the
-- lanes this one holds and takes the next oldest. MATERIALIZED keeps the lock call out of
-- the CTE, so only lanes that have work get locked. Locks last until the transaction ends.
-- The rows themselves must be read by a LATER statement (outbox_pending_get): this
-- statement's snapshot may predate the commit of the relay that held a lane before us.
WITH pending AS MATERIALIZED (
    SELECT l.lane
    FROM generate_series(0, 63) AS l(lane)
    CROSS JOIN LATERAL (
        SELECT min(o.id) AS oldest FROM ops.outbox o
        WHERE o.lane = l.lane::smallint AND o.published_at IS NULL
    ) head
    WHERE l.lane <> ALL($2::int[]) AND head.oldest IS NOT NULL
    ORDER BY head.oldest
)
SELECT lane FROM pending
WHERE pg_try_advisory_xact_lock($1::int, lane)
LIMIT $3;

-- name: outbox_pending_get
-- The oldest unpublished rows of each locked lane: lane $1[i] gives at most $2[i] rows
-- (1 for a lane that only probes its refused head row), all in id order.
-- Selecting by published_at IS NULL (not "id > last seen") is what keeps a row whose
-- transaction commits after a higher id from being skipped.
SELECT o.id, o.lane, o.topic, o.key, o.payload::text AS payload, o.headers::text AS headers,
       o.created_at
FROM unnest($1::smallint[], $2::int[]) AS l(lane, max_rows)
CROSS JOIN LATERAL (
    SELECT id, lane, topic, key, payload, headers, created_at
    FROM ops.outbox
    WHERE lane = l.lane AND published_at IS NULL
    ORDER BY id
    LIMIT l.max_rows
) AS o
ORDER BY o.id;

-- name: outbox_published_mark
-- Acknowledged rows, with the partition and offset Kafka gave each (for explain).
WITH marked AS (
    UPDATE ops.outbox o
    SET published_at = $2, published_partition = a.partition, published_offset = a.kafka_offset
    FROM unnest($1::bigint[], $3::int[], $4::bigint[]) AS a(id, partition, kafka_offset)
    WHERE o.id = a.id AND o.published_at IS NULL
    RETURNING 1
)
SELECT count(*) FROM marked;

-- name: outbox_backlog_get
-- Count walks the partial index of unpublished rows only. The oldest row is looked up as the
-- head of each lane (64 index probes) instead of min() over the whole backlog; a head is the
-- lowest id, which is the oldest row of its lane up to transactions that overlapped.
SELECT
    (SELECT count(*) FROM ops.outbox WHERE published_at IS NULL) AS backlog,
    (
        SELECT min(h.created_at)
        FROM generate_series(0, 63) AS l(lane)
        CROSS JOIN LATERAL (
            SELECT created_at FROM ops.outbox
            WHERE lane = l.lane::smallint AND published_at IS NULL
            ORDER BY id
            LIMIT 1
        ) AS h
    ) AS oldest_created_at;

-- name: outbox_published_delete
-- One bounded chunk of rows published before $1 (at most $2). SKIP LOCKED lets two workers
-- run retention at once without waiting on each other.
WITH doomed AS (
    SELECT id FROM ops.outbox
    WHERE published_at < $1
    ORDER BY published_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM ops.outbox o USING doomed d WHERE o.id = d.id RETURNING 1
)
SELECT count(*) FROM deleted;

-- name: outbox_listener_ping
-- Proves the LISTEN connection is alive (a silently dropped socket would lose NOTIFYs).
SELECT 1;

-- name: outbox_pass_keepalive
-- A relay pass still waiting for Kafka's acknowledgements keeps its session (and with it its
-- lanes) from idle_in_transaction_session_timeout.
SELECT 1;

-- name: outbox_records_of_key
-- The outbox records of one key (an entity) still within retention, oldest first (explain),
-- with its parked rows (parked_reason set; ops.outbox_parked is small, scanned as it is).
SELECT id, topic, key, headers::text AS headers, created_at, published_at,
       published_partition, published_offset, payload::text AS payload,
       NULL::text AS parked_reason
FROM ops.outbox
WHERE key = $1
UNION ALL
SELECT id, topic, key, headers::text, created_at, NULL, NULL, NULL, payload::text, reason
FROM ops.outbox_parked
WHERE key = $1
ORDER BY id
LIMIT $2;

-- name: outbox_parked_move
-- Rows Kafka refused for good leave their lane (the relay holds it): one statement moves
-- them to ops.outbox_parked with why ($1 ids, $2 reasons, $3 errors, $4 refusals, $5 now).
WITH doomed AS (
    DELETE FROM ops.outbox o
    USING unnest($1::bigint[], $2::text[], $3::text[], $4::int[]) AS p(id, reason, error, refusals)
    WHERE o.id = p.id AND o.published_at IS NULL
    RETURNING o.id, o.topic, o.key, o.payload, o.headers, o.created_at, p.reason, p.error,
              p.refusals
), moved AS (
    INSERT INTO ops.outbox_parked
        (id, topic, key, payload, headers, created_at, parked_at, reason, error, refusals)
    SELECT id, topic, key, payload, headers, created_at, $5, reason, error, refusals FROM doomed
    RETURNING 1
)
SELECT count(*) FROM moved;

-- name: outbox_parked_list
-- Parked rows, oldest first, without their payloads (they may hold personal data).
SELECT id, topic, key, octet_length(payload::text) AS payload_bytes, created_at, parked_at,
       reason, error, refusals
FROM ops.outbox_parked
ORDER BY id
LIMIT $1;

-- name: outbox_parked_stats
-- How many rows are parked, by reason (for /status and the outbox_parked gauge).
SELECT reason, count(*) AS parked, min(parked_at) AS oldest_parked_at
FROM ops.outbox_parked
GROUP BY reason
ORDER BY reason;

-- name: outbox_parked_retry
-- A parked row back into ops.outbox with its own id (so the same outbox-id header) and its
-- own created_at: it is the head of its lane again and the relay sends it next.
WITH back AS (
    DELETE FROM ops.outbox_parked WHERE id = $1
    RETURNING id, topic, key, payload, headers, created_at
), inserted AS (
    INSERT INTO ops.outbox (id, topic, key, payload, headers, created_at)
    OVERRIDING SYSTEM VALUE
    SELECT id, topic, key, payload, headers, created_at FROM back
    RETURNING id
)
SELECT count(*) FROM inserted;

-- name: outbox_parked_drop
-- Deletes one parked row for good; returns its topic and reason (NULL: no such row).
DELETE FROM ops.outbox_parked WHERE id = $1 RETURNING topic, reason;

-- name: outbox_minutes
-- The console's charts: per topic of $3 and per minute of [$1, $2), the records written
-- (those written before $1 and still waiting at $1 count in its first minute), the records
-- published, and the p95 and max of their wait (created_at -> published_at). Reads the rows
-- published in the window (a backward range of ix_outbox_published_at) and those still
-- waiting (ix_outbox_unpublished), each side at most $4 rows, newest first: the work is
-- bounded whatever the traffic (past $4 the oldest minutes come out short). The caller turns
-- written - published into a backlog per minute.
WITH published AS (
    SELECT topic, created_at, published_at FROM ops.outbox
    WHERE published_at >= $1 AND published_at < $2 AND topic = ANY($3::text[])
    ORDER BY published_at DESC LIMIT $4
), waiting AS (
    SELECT topic, created_at FROM ops.outbox
    WHERE published_at IS NULL AND topic = ANY($3::text[])
    ORDER BY lane, id LIMIT $4
), sent AS (
    SELECT topic, date_trunc('minute', published_at) AS minute, count(*)::int AS published,
           percentile_cont(0.95) WITHIN GROUP (
               ORDER BY extract(epoch FROM published_at - created_at)::float8) AS wait_p95_seconds,
           max(extract(epoch FROM published_at - created_at))::float8 AS wait_max_seconds
    FROM published GROUP BY 1, 2
), written AS (
    SELECT topic,
           greatest(date_trunc('minute', created_at), date_trunc('minute', $1::timestamptz))
               AS minute,
           count(*)::int AS written
    FROM (SELECT topic, created_at FROM published UNION ALL SELECT topic, created_at FROM waiting) w
    WHERE created_at < $2
    GROUP BY 1, 2
)
SELECT topic, minute, coalesce(w.written, 0) AS written, coalesce(s.published, 0) AS published,
       s.wait_p95_seconds, s.wait_max_seconds
FROM sent s FULL JOIN written w USING (topic, minute)
ORDER BY topic, minute;
