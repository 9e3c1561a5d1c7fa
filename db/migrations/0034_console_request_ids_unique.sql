-- migrate: no-transaction
-- A request id is recorded once (0032): two concurrent deliveries of one request cannot both
-- act, the second's transaction fails on this index and rolls back. Built without a write lock.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ux_console_audit_request_id
    ON ops.console_audit (request_id) WHERE request_id IS NOT NULL;
