-- Statements of the worker's own health checks.

-- name: health_ping
-- Readiness: PostgreSQL answers a statement on a pooled connection.
SELECT 1;
