-- Periodic-task registry: ops.timer_slots (cluster-once claims) and ops.timer_state.

-- name: timer_slot_claim
-- Insert-wins: returns the row for exactly one claimant of (name, slot), nothing for the rest.
-- The claim holds the slot until $5 (NULL: for ever).
INSERT INTO ops.timer_slots (name, slot, claimed_by, run_id, lease_expires_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (name, slot) DO NOTHING
RETURNING run_id;

-- name: timer_slot_reclaim
-- Takes over a slot whose run never finished and whose lease ran out at or before $6 (the
-- caller's now); the new holder keeps it until $5. Of several workers racing, the first
-- UPDATE wins; the others wait for its row lock, re-check the updated row (READ COMMITTED)
-- and find a live lease: never two live claimants.
UPDATE ops.timer_slots
SET claimed_by = $3, run_id = $4, lease_expires_at = $5, claimed_at = now(),
    takeovers = takeovers + 1
WHERE name = $1 AND slot = $2 AND finished_at IS NULL AND lease_expires_at <= $6
RETURNING run_id;

-- name: timer_slot_unfinished
-- Unfinished slots of one schedule from $2 on, with their leases (ix_timer_slots_unfinished).
SELECT slot, lease_expires_at
FROM ops.timer_slots
WHERE name = $1 AND finished_at IS NULL AND slot >= $2 AND lease_expires_at IS NOT NULL
ORDER BY slot
LIMIT $3;

-- name: timer_slot_finish
-- Fenced on run_id: once another worker took the slot over, the original holder's finish
-- changes nothing (and returns no row).
UPDATE ops.timer_slots
SET finished_at = now(), result = $4, duration_seconds = $5
WHERE name = $1 AND slot = $2 AND run_id = $3
RETURNING 1;

-- name: timer_slot_prune
-- Batched so a long backlog never holds one huge delete; the caller repeats until short.
WITH doomed AS (
    SELECT name, slot FROM ops.timer_slots WHERE slot < $1 ORDER BY slot LIMIT $2
), deleted AS (
    DELETE FROM ops.timer_slots t USING doomed d
    WHERE t.name = d.name AND t.slot = d.slot
    RETURNING 1
)
SELECT count(*) FROM deleted;

-- name: timer_state_advance
-- Never moves backwards: a late catch-up run must not hide a newer slot.
INSERT INTO ops.timer_state (name, last_slot, last_worker)
VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE
SET last_slot = EXCLUDED.last_slot, last_worker = EXCLUDED.last_worker, updated_at = now()
WHERE ops.timer_state.last_slot < EXCLUDED.last_slot;

-- name: timer_state_list
SELECT name, last_slot FROM ops.timer_state WHERE name = ANY($1::text[]);
