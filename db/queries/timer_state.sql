-- ops.timer_state: the last started slot of each periodic task.

-- name: timer_state_advance
-- Never moves backwards: a late catch-up run must not hide a newer slot.
INSERT INTO ops.timer_state (name, last_slot, last_worker)
VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE
SET last_slot = EXCLUDED.last_slot, last_worker = EXCLUDED.last_worker, updated_at = now()
WHERE ops.timer_state.last_slot < EXCLUDED.last_slot;

-- name: timer_state_last_slots
SELECT name, last_slot FROM ops.timer_state WHERE name = ANY($1::text[]);
