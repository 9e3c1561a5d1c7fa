-- ops.timer_pauses: schedules paused cluster-wide (every worker's registry reads it per run).
-- Pause and resume are audited in ops.console_audit by the same statement.

-- name: timer_pauses_get
-- The one read a registry makes before a run: a primary-key lookup. $1 schedule.
SELECT schedule, paused_at, paused_by, reason FROM ops.timer_pauses WHERE schedule = $1;

-- name: timer_pauses_list_all
SELECT schedule, paused_at, paused_by, reason FROM ops.timer_pauses ORDER BY schedule;

-- name: timer_pauses_pause
-- Idempotent: pausing a paused schedule changes nothing (its first pause is kept).
-- $1 schedule, $2 actor, $3 reason, $4 now.
WITH cur AS (
    SELECT schedule FROM ops.timer_pauses WHERE schedule = $1
), ins AS (
    INSERT INTO ops.timer_pauses (schedule, paused_at, paused_by, reason)
    VALUES ($1, $4, $2, $3)
    ON CONFLICT (schedule) DO NOTHING
    RETURNING schedule
), res AS (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM ins) THEN 'changed' ELSE 'unchanged' END AS outcome,
           CASE WHEN EXISTS (SELECT 1 FROM cur) OR NOT EXISTS (SELECT 1 FROM ins)
                THEN 'paused' ELSE 'running' END AS state_before
), aud AS (
    INSERT INTO ops.console_audit (at, actor, action, listing, target, reason, outcome,
                                   state_before, state_after)
    SELECT $4, $2, 'pause', 'timers', $1, $3, outcome, state_before, 'paused' FROM res
    RETURNING id
)
SELECT res.outcome, res.state_before, 'paused' AS state_after, aud.id AS audit_id
FROM res CROSS JOIN aud;

-- name: timer_pauses_resume
-- Idempotent: resuming a running schedule changes nothing. $1 schedule, $2 actor,
-- $3 reason, $4 now.
WITH del AS (
    DELETE FROM ops.timer_pauses WHERE schedule = $1 RETURNING schedule
), res AS (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM del) THEN 'changed' ELSE 'unchanged' END AS outcome,
           CASE WHEN EXISTS (SELECT 1 FROM del) THEN 'paused' ELSE 'running' END AS state_before
), aud AS (
    INSERT INTO ops.console_audit (at, actor, action, listing, target, reason, outcome,
                                   state_before, state_after)
    SELECT $4, $2, 'resume', 'timers', $1, $3, outcome, state_before, 'running' FROM res
    RETURNING id
)
SELECT res.outcome, res.state_before, 'running' AS state_after, aud.id AS audit_id
FROM res CROSS JOIN aud;
