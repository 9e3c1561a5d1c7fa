-- Retries of cluster-once slots: a run that failed, timed out or was cancelled releases its
-- slot instead of finishing it, so the same slot (same key, same row) runs again after a
-- backoff, up to the schedule's attempt bound; then it is finished with its last result. A
-- graceful stop hands the slot back (released at once, no attempt counted).
-- A released row is unfinished (finished_at NULL) with released_at set and its lease set to
-- next_attempt_at, so the takeover path (ix_timer_slots_unfinished) picks it up when due.
ALTER TABLE ops.timer_slots
    -- Attempts that ended (ok, failed, timeout, cancelled); a hand-back is not one.
    ADD COLUMN attempts        integer NOT NULL DEFAULT 0,
    ADD COLUMN handbacks       integer NOT NULL DEFAULT 0,
    -- Set while nobody holds the slot: it waits for its next attempt.
    ADD COLUMN released_at     timestamptz,
    ADD COLUMN next_attempt_at timestamptz,
    -- The exception class (or timeout / cancelled) of the last attempt that did not end ok;
    -- never the driver's message or DETAIL text.
    ADD COLUMN last_error      text;

-- Rows finished before this migration ran once.
UPDATE ops.timer_slots SET attempts = 1 WHERE finished_at IS NOT NULL;
