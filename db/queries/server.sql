-- Statements on the server itself, not on a table: health checks,
-- connection limits, advisory lock holders.

-- name: server_ping
-- Readiness: PostgreSQL answers a statement on a pooled connection.
SELECT 1;

-- name: server_connection_limits
-- What the server lets clients open: max_connections minus the slots kept for superusers
-- and (PostgreSQL 16+) for roles with pg_use_reserved_connections; NULL before 16.
SELECT current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int AS superuser_reserved,
       COALESCE(NULLIF(current_setting('reserved_connections', true), ''), '0')::int
           AS reserved;

-- name: server_advisory_lock_holders
-- Who holds (granted) the session advisory lock on key $1 (pg_advisory_lock(bigint) is
-- classid = high 32 bits, objid = low 32 bits, objsubid = 1): pid, application name, since.
SELECT l.pid, a.application_name, a.client_addr::text AS client_addr, a.backend_start,
       a.state, a.xact_start
FROM pg_locks l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory'
  AND l.granted
  AND l.objsubid = 1
  AND l.classid::bigint = ($1::bigint >> 32)
  AND l.objid::bigint = ($1::bigint & 4294967295)
ORDER BY l.pid;

-- name: server_clock
-- The database's time now (clock_timestamp(), not the transaction's start): the instant a
-- worker's clock is set to (streams/clock.py, DatabaseClock).
SELECT clock_timestamp() AS now;

-- name: server_invalid_index
-- An index left INVALID by an interrupted CREATE INDEX CONCURRENTLY ($1 schema, $2 name): the
-- statement that drops it without a write lock (names quoted by the server), or no row. Only
-- the migrator asks, under its advisory lock, so no other build of it is in progress.
SELECT format('DROP INDEX CONCURRENTLY IF EXISTS %I.%I', n.nspname, c.relname) AS drop_statement
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND NOT i.indisvalid;
