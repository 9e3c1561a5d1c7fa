-- Statements of the worker's own health checks.

-- name: health_ping
-- Readiness: PostgreSQL answers a statement on a pooled connection.
SELECT 1;

-- name: session_plan_for_parameters
-- For the rest of this transaction, plan every statement for its parameters. Batch statements
-- join arrays of keys (unnest($1::uuid[])) with large tables; a generic plan cannot see that
-- a batch holds a few hundred keys, and one made while a table was small scans it whole on
-- every later batch (tests/integration/test_statement_plans.py). Planning costs under a
-- millisecond per batch; it is not set for the whole session, where the dispatcher's and the
-- relay's many small statements would pay it too (lateness p99 167 ms against 92 ms).
SET LOCAL plan_cache_mode = force_custom_plan;
