-- automation.scheduler, the console's actions (streams/slices/automation/actions.py): each
-- one statement that changes the row only in a state that allows it and writes its
-- ops.console_audit row in the same statement.

-- name: scheduler_actions_cancel
-- The console's cancel of a Pending or Failed row: Cancelled with ReasonCode 'ManualCancel'
-- and any support hold lifted (nothing is left to support). A Cancelled row is unchanged;
-- Processing, Completed and Deactivated rows are refused. Audited in the same statement.
-- $1 scheduler id, $2 actor, $3 reason, $4 now, $5 listing.
WITH cur AS (
    SELECT scheduler_id, status_id, is_on_support_hold FROM automation.scheduler
    WHERE scheduler_id = $1::bigint
    FOR NO KEY UPDATE
), upd AS (
    UPDATE automation.scheduler s
    SET status_id = 'Cancelled', status_reason_code = 'ManualCancel',
        is_on_support_hold = false, next_retry_on = NULL,
        version = s.version + 1, updated_on = $4
    FROM cur
    WHERE s.scheduler_id = cur.scheduler_id AND cur.status_id IN ('Pending', 'Failed')
    RETURNING s.status_id
), res AS (
    SELECT CASE WHEN cur.scheduler_id IS NULL THEN 'not_found'
                WHEN EXISTS (SELECT 1 FROM upd) THEN 'changed'
                WHEN cur.status_id = 'Cancelled' THEN 'unchanged'
                ELSE 'refused' END AS outcome,
           cur.status_id || CASE WHEN cur.is_on_support_hold THEN ', on hold' ELSE '' END
               AS state_before,
           coalesce((SELECT status_id FROM upd),
                    cur.status_id || CASE WHEN cur.is_on_support_hold THEN ', on hold'
                                          ELSE '' END) AS state_after
    FROM (SELECT 1) one LEFT JOIN cur ON true
), aud AS (
    INSERT INTO ops.console_audit (at, actor, action, listing, target, reason, outcome,
                                   state_before, state_after)
    SELECT $4, $2, 'cancel', $5, $1::bigint::text, $3, outcome, state_before, state_after
    FROM res
    RETURNING id
)
SELECT res.outcome, res.state_before, res.state_after, aud.id AS audit_id
FROM res CROSS JOIN aud;

-- name: scheduler_actions_resend
-- The console's re-send of a Completed row through the seed's support-retry key: the row
-- is Pending and due now from a fresh ladder, recorded as support_action 'support-retry';
-- the next claim dispatches it again (its old DispatchResultJson stays until then). A row
-- already queued for a re-send (Pending, support-retry) is unchanged; any other state is
-- refused. Audited in the same statement. $1 scheduler id, $2 actor, $3 reason, $4 now,
-- $5 listing.
WITH cur AS (
    SELECT scheduler_id, status_id, support_action FROM automation.scheduler
    WHERE scheduler_id = $1::bigint
    FOR NO KEY UPDATE
), upd AS (
    UPDATE automation.scheduler s
    SET status_id = 'Pending', next_retry_on = NULL, retry_count = 0, interrupted_count = 0,
        is_on_support_hold = false,
        support_action = 'support-retry', support_action_on = $4,
        support_action_count = s.support_action_count + 1,
        version = s.version + 1, updated_on = $4
    FROM cur
    WHERE s.scheduler_id = cur.scheduler_id AND cur.status_id = 'Completed'
    RETURNING s.status_id
), res AS (
    SELECT CASE WHEN cur.scheduler_id IS NULL THEN 'not_found'
                WHEN EXISTS (SELECT 1 FROM upd) THEN 'changed'
                WHEN cur.status_id = 'Pending' AND cur.support_action = 'support-retry'
                    THEN 'unchanged'
                ELSE 'refused' END AS outcome,
           cur.status_id AS state_before,
           coalesce((SELECT status_id FROM upd), cur.status_id) AS state_after
    FROM (SELECT 1) one LEFT JOIN cur ON true
), aud AS (
    INSERT INTO ops.console_audit (at, actor, action, listing, target, reason, outcome,
                                   state_before, state_after)
    SELECT $4, $2, 'resend', $5, $1::bigint::text, $3, outcome, state_before, state_after
    FROM res
    RETURNING id
)
SELECT res.outcome, res.state_before, res.state_after, aud.id AS audit_id
FROM res CROSS JOIN aud;

-- name: scheduler_actions_release
-- The console's release / retry-key of a row on support hold: the same change as
-- scheduler_release ($6 resets the attempts: retry-key), audited in the same statement. A
-- row not on hold whose last support action is this one is unchanged (asked twice); other
-- rows not on hold are refused. $1 scheduler id, $2 actor, $3 reason, $4 now, $5 listing,
-- $6 reset attempts, $7 action ('release' or 'retry-key').
WITH cur AS (
    SELECT scheduler_id, status_id, is_on_support_hold, support_action
    FROM automation.scheduler
    WHERE scheduler_id = $1::bigint
    FOR NO KEY UPDATE
), upd AS (
    UPDATE automation.scheduler s
    SET is_on_support_hold = false,
        status_id = CASE WHEN s.status_id = 'Failed' THEN 'Pending' ELSE s.status_id END,
        next_retry_on = CASE WHEN s.status_id IN ('Failed', 'Pending') THEN NULL
                             ELSE s.next_retry_on END,
        retry_count = CASE WHEN $6::boolean THEN 0 ELSE s.retry_count END,
        interrupted_count = CASE WHEN $6::boolean THEN 0 ELSE s.interrupted_count END,
        support_action = $7::text,
        support_action_on = $4,
        support_action_count = s.support_action_count + 1,
        version = s.version + 1,
        updated_on = $4
    FROM cur
    WHERE s.scheduler_id = cur.scheduler_id AND cur.is_on_support_hold
    RETURNING s.status_id
), res AS (
    SELECT CASE WHEN cur.scheduler_id IS NULL THEN 'not_found'
                WHEN EXISTS (SELECT 1 FROM upd) THEN 'changed'
                WHEN cur.support_action = $7::text THEN 'unchanged'
                ELSE 'refused' END AS outcome,
           cur.status_id || CASE WHEN cur.is_on_support_hold THEN ', on hold' ELSE '' END
               AS state_before,
           coalesce((SELECT status_id FROM upd),
                    cur.status_id || CASE WHEN cur.is_on_support_hold THEN ', on hold'
                                          ELSE '' END) AS state_after
    FROM (SELECT 1) one LEFT JOIN cur ON true
), aud AS (
    INSERT INTO ops.console_audit (at, actor, action, listing, target, reason, outcome,
                                   state_before, state_after)
    SELECT $4, $2, $7::text, $5, $1::bigint::text, $3, outcome, state_before, state_after
    FROM res
    RETURNING id
)
SELECT res.outcome, res.state_before, res.state_after, aud.id AS audit_id
FROM res CROSS JOIN aud;

-- name: scheduler_actions_reopen
-- The console's undo of its own cancel: a row Cancelled by an operator (ReasonCode
-- 'ManualCancel') is Pending again, due at its ScheduledOn (at once when that is past;
-- execution revalidates it as any due row), recorded as support_action 'reopen'. Only an
-- operator's cancel is reopened here: inputs never reopen it (scheduler_ensure), and a
-- system's cancellation or deactivation is reactivated by its inputs instead (refused). A
-- row no longer Cancelled whose last support action is this one is unchanged (asked
-- twice). Audited in the same statement. $1 scheduler id, $2 actor, $3 reason, $4 now,
-- $5 listing.
WITH cur AS (
    SELECT scheduler_id, status_id, status_reason_code, support_action
    FROM automation.scheduler
    WHERE scheduler_id = $1::bigint
    FOR NO KEY UPDATE
), upd AS (
    UPDATE automation.scheduler s
    SET status_id = 'Pending', status_reason_code = NULL, next_retry_on = NULL,
        support_action = 'reopen', support_action_on = $4,
        support_action_count = s.support_action_count + 1,
        version = s.version + 1, updated_on = $4
    FROM cur
    WHERE s.scheduler_id = cur.scheduler_id AND cur.status_id = 'Cancelled'
      AND cur.status_reason_code = 'ManualCancel'
    RETURNING s.status_id
), res AS (
    SELECT CASE WHEN cur.scheduler_id IS NULL THEN 'not_found'
                WHEN EXISTS (SELECT 1 FROM upd) THEN 'changed'
                WHEN cur.status_id <> 'Cancelled' AND cur.support_action = 'reopen'
                    THEN 'unchanged'
                ELSE 'refused' END AS outcome,
           cur.status_id || coalesce(' (' || cur.status_reason_code || ')', '') AS state_before,
           coalesce((SELECT status_id FROM upd),
                    cur.status_id || coalesce(' (' || cur.status_reason_code || ')', ''))
               AS state_after
    FROM (SELECT 1) one LEFT JOIN cur ON true
), aud AS (
    INSERT INTO ops.console_audit (at, actor, action, listing, target, reason, outcome,
                                   state_before, state_after)
    SELECT $4, $2, 'reopen', $5, $1::bigint::text, $3, outcome, state_before, state_after
    FROM res
    RETURNING id
)
SELECT res.outcome, res.state_before, res.state_after, aud.id AS audit_id
FROM res CROSS JOIN aud;
