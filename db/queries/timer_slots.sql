-- ops.timer_slots: cluster-once claims of periodic-task slots.

-- name: timer_slots_claim
-- Insert-wins: returns the row for exactly one claimant of (name, slot), nothing for the rest.
-- The claim holds the slot until $5 (NULL: for ever).
INSERT INTO ops.timer_slots (name, slot, claimed_by, run_id, lease_expires_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (name, slot) DO NOTHING
RETURNING run_id;

-- name: timer_slots_reclaim
-- Takes over a slot whose run never finished and whose lease ran out at or before $6 (the
-- caller's now): a dead or stalled claimant's, or a released slot whose next attempt is due
-- (its lease is next_attempt_at). With $7 a released slot is taken before its backoff too
-- (an operator's manual run). The new holder keeps it until $5. Of several workers racing,
-- the first UPDATE wins; the others wait for its row lock, re-check the updated row (READ
-- COMMITTED) and find a live lease: never two live claimants.
UPDATE ops.timer_slots
SET claimed_by = $3, run_id = $4, lease_expires_at = $5, claimed_at = now(),
    takeovers = takeovers + CASE WHEN released_at IS NULL THEN 1 ELSE 0 END,
    released_at = NULL, next_attempt_at = NULL
WHERE name = $1 AND slot = $2 AND finished_at IS NULL
  AND (lease_expires_at <= $6 OR ($7 AND released_at IS NOT NULL))
RETURNING run_id;

-- name: timer_slots_unfinished
-- Unfinished slots of one schedule from $2 on, with their leases (ix_timer_slots_unfinished).
SELECT slot, lease_expires_at
FROM ops.timer_slots
WHERE name = $1 AND finished_at IS NULL AND slot >= $2 AND lease_expires_at IS NOT NULL
ORDER BY slot
LIMIT $3;

-- name: timer_slots_give_up_released
-- Released slots of one schedule older than $2 (the retry window's floor) are final: their
-- last result stands. Each row is returned to exactly one caller, so it is counted once.
UPDATE ops.timer_slots
SET finished_at = now(), released_at = NULL, next_attempt_at = NULL
WHERE name = $1 AND slot < $2 AND finished_at IS NULL AND released_at IS NOT NULL
RETURNING slot;

-- name: timer_slots_attempts
-- Attempts that ended so far, for the holder of run $3 deciding whether its failure retries.
SELECT attempts FROM ops.timer_slots WHERE name = $1 AND slot = $2 AND run_id = $3;

-- name: timer_slots_finish
-- Final: counts the attempt and records its result ($6: the error class of a final failure).
-- Fenced on run_id: once another worker took the slot over, the original holder's finish
-- changes nothing (and returns no row).
UPDATE ops.timer_slots
SET finished_at = now(), result = $4, duration_seconds = $5, attempts = attempts + 1,
    last_error = COALESCE($6, last_error), released_at = NULL, next_attempt_at = NULL
WHERE name = $1 AND slot = $2 AND run_id = $3
RETURNING 1;

-- name: timer_slots_release
-- Not final: the slot stays unfinished and nobody holds it until $6 (next_attempt_at, also
-- its lease, so the takeover path runs it then). $7 counts the attempt (a retry after a
-- failure) or not (a hand-back on a graceful stop). Fenced on run_id like the finish.
UPDATE ops.timer_slots
SET result = $4, duration_seconds = $5, next_attempt_at = $6, lease_expires_at = $6,
    released_at = now(), last_error = $8,
    attempts = attempts + CASE WHEN $7 THEN 1 ELSE 0 END,
    handbacks = handbacks + CASE WHEN $7 THEN 0 ELSE 1 END
WHERE name = $1 AND slot = $2 AND run_id = $3 AND finished_at IS NULL
RETURNING 1;

-- name: timer_slots_prune
-- Batched so a long backlog never holds one huge delete; the caller repeats until short.
WITH doomed AS (
    SELECT name, slot FROM ops.timer_slots WHERE slot < $1 ORDER BY slot LIMIT $2
), deleted AS (
    DELETE FROM ops.timer_slots t USING doomed d
    WHERE t.name = d.name AND t.slot = d.slot
    RETURNING 1
)
SELECT count(*) FROM deleted;
