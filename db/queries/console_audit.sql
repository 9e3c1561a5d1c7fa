-- ops.console_audit: one row per console action asked for (streams/console). The actions'
-- own statements write their row in the same statement; these read it, and record the
-- actions that change no table row (a DLQ replay).

-- name: console_audit_record
-- $1 now, $2 actor, $3 action, $4 listing, $5 target, $6 reason, $7 outcome, $8 details.
INSERT INTO ops.console_audit (at, actor, action, listing, target, reason, outcome, details)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)
RETURNING id;

-- name: console_audit_of_target
-- The newest actions on one row, newest first. $1 listing, $2 target, $3 limit.
SELECT id, at, actor, action, listing, target, reason, outcome, state_before, state_after,
       details
FROM ops.console_audit
WHERE listing = $1 AND target = $2
ORDER BY at DESC, id DESC
LIMIT $3;

-- name: console_audit_of_request
-- The audit row of a console request already done (its id is unique). $1 request id.
SELECT id, action, listing, target, outcome, state_before, state_after
FROM ops.console_audit
WHERE request_id = $1;

-- name: console_audit_claim_request
-- Records the request id on the audit row the action's statement just wrote, in the action's
-- transaction: a second delivery of the same request fails here (ux_console_audit_request_id)
-- and its transaction, the row change with it, rolls back. $1 audit id, $2 request id.
UPDATE ops.console_audit SET request_id = $2 WHERE id = $1 AND request_id IS NULL
RETURNING id;
