-- Periodic-task registry: ops.timer_slots (cluster-once claims) and ops.timer_state.

-- name: timer_slot_claim
-- Insert-wins: returns the row for exactly one claimant of (name, slot), nothing for the rest.
INSERT INTO ops.timer_slots (name, slot, claimed_by, run_id)
VALUES ($1, $2, $3, $4)
ON CONFLICT (name, slot) DO NOTHING
RETURNING run_id;

-- name: timer_slot_finish
UPDATE ops.timer_slots
SET finished_at = now(), result = $4, duration_seconds = $5
WHERE name = $1 AND slot = $2 AND run_id = $3;

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
