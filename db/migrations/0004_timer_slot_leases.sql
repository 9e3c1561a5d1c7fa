-- Leases on cluster-once slot claims: a claimant that died (SIGKILL) or is paused (SIGSTOP)
-- mid-run must not leave its slot unrun. A claim holds its slot until lease_expires_at
-- (claim time + the schedule's max duration + a margin; the registry cancels a run at its
-- max duration, so a live holder finishes before it). A slot whose run never finished and
-- whose lease expired is taken over by one other worker (a conditional UPDATE), which runs
-- it; the original holder's late finish is fenced off by run_id.
-- Claims made before this migration have no lease (NULL) and are never taken over.
ALTER TABLE ops.timer_slots
    ADD COLUMN lease_expires_at timestamptz,
    ADD COLUMN takeovers        integer NOT NULL DEFAULT 0;

-- What every planning step of a cluster-once schedule reads: its unfinished slots (running,
-- or abandoned by a dead claimant). Finished rows are not in the index, so it stays tiny.
CREATE INDEX ix_timer_slots_unfinished ON ops.timer_slots (name, slot)
    WHERE finished_at IS NULL;
