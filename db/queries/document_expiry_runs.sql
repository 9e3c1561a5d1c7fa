-- profile.document_expiry_runs: one row per document expiry run (progress, outcome).

-- name: document_expiry_runs_start
INSERT INTO profile.document_expiry_runs (run_id, slot, as_of_date, thresholds, started_at)
VALUES ($1, $2, $3, $4, $5);

-- name: document_expiry_runs_total_set
-- The number of owners the run handed out (known once its scan is over).
UPDATE profile.document_expiry_runs SET owners_total = $2 WHERE run_id = $1;

-- name: document_expiry_runs_progress
-- Per-owner workers add what they did, for one or several runs at once.
UPDATE profile.document_expiry_runs r
SET owners_done = r.owners_done + p.done,
    owners_failed = r.owners_failed + p.failed,
    owners_notified = r.owners_notified + p.notified,
    reminders_sent = r.reminders_sent + p.sent,
    skipped_already_marked = r.skipped_already_marked + p.skipped
FROM unnest($1::text[], $2::int[], $3::int[], $4::int[], $5::int[], $6::int[])
     AS p(run_id, done, failed, notified, sent, skipped)
WHERE r.run_id = p.run_id;

-- name: document_expiry_runs_get
SELECT run_id, slot, as_of_date, thresholds, started_at, owners_total, owners_done,
       owners_failed, owners_notified, reminders_sent, skipped_already_marked, pruned, backlog,
       finished_at, duration_ms
FROM profile.document_expiry_runs WHERE run_id = $1;

-- name: document_expiry_runs_finish
UPDATE profile.document_expiry_runs
SET pruned = $2, backlog = $3, finished_at = $4, duration_ms = $5
WHERE run_id = $1;

-- name: document_expiry_runs_prune
-- Run rows are history for operators; kept as long as the markers.
DELETE FROM profile.document_expiry_runs WHERE started_at < $1;

-- name: document_expiry_runs_console_page
-- The console's page of runs, newest first: (started_at, run_id) before the keyset bound
-- ($1, $2), from $3 on, at most $4, in state $5 (Unfinished: no finished_at yet — running,
-- or stopped before it finished; WithFailures: finished with failed owners; Finished).
-- One row a day: ix_document_expiry_runs_started_at is enough.
SELECT * FROM (
    SELECT run_id, slot, as_of_date, thresholds, started_at, owners_total, owners_done,
           owners_failed, owners_notified, reminders_sent, skipped_already_marked, pruned,
           backlog, finished_at, duration_ms,
           CASE WHEN finished_at IS NULL THEN 'Unfinished'
                WHEN owners_failed > 0 THEN 'WithFailures'
                ELSE 'Finished' END AS state
    FROM profile.document_expiry_runs
    WHERE (started_at, run_id) < ($1::timestamptz, $2::text) AND started_at >= $3
) r
WHERE state = $5
ORDER BY started_at DESC, run_id DESC
LIMIT $4;

-- name: document_expiry_runs_console_counts
-- Runs by console state (as document_expiry_runs_console_page).
SELECT CASE WHEN finished_at IS NULL THEN 'Unfinished'
            WHEN owners_failed > 0 THEN 'WithFailures'
            ELSE 'Finished' END AS state, count(*) AS n
FROM profile.document_expiry_runs
GROUP BY 1;
