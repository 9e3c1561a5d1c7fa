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
