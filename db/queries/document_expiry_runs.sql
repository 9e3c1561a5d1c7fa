-- profile.document_expiry_runs: one row per document expiry run (progress, outcome).

-- name: document_expiry_runs_start
INSERT INTO profile.document_expiry_runs (run_id, slot, as_of_date, thresholds, started_at)
VALUES ($1, $2, $3, $4, $5);

-- name: document_expiry_runs_total_set
-- The number of owners the run handed out (known once its scan is over).
UPDATE profile.document_expiry_runs SET owners_total = $2 WHERE run_id = $1;

-- name: document_expiry_runs_progress
-- Per-owner workers add what they did, for one or several runs at once, per work item
-- ($2: 'partition:offset', 'owner:<uuid>', or NULL for owners handed over inline). An item
-- counts once: only when this statement inserts its row (a redelivered record adds nothing).
-- Items of a run that is gone (pruned) are dropped.
WITH p AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::int[], $6::int[],
                         $7::int[])
        AS p(run_id, item, done, failed, notified, sent, skipped)
), fresh AS (
    INSERT INTO profile.document_expiry_run_items (run_id, item)
    SELECT p.run_id, p.item
    FROM p JOIN profile.document_expiry_runs r ON r.run_id = p.run_id
    WHERE p.item IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING run_id, item
), counted AS (
    SELECT p.run_id, sum(p.done) AS done, sum(p.failed) AS failed,
           sum(p.notified) AS notified, sum(p.sent) AS sent, sum(p.skipped) AS skipped
    FROM p LEFT JOIN fresh f ON f.run_id = p.run_id AND f.item = p.item
    WHERE p.item IS NULL OR f.item IS NOT NULL
    GROUP BY p.run_id
)
UPDATE profile.document_expiry_runs r
SET owners_done = r.owners_done + c.done,
    owners_failed = r.owners_failed + c.failed,
    owners_notified = r.owners_notified + c.notified,
    reminders_sent = r.reminders_sent + c.sent,
    skipped_already_marked = r.skipped_already_marked + c.skipped
FROM counted c
WHERE r.run_id = c.run_id;

-- name: document_expiry_runs_items_counted
-- Which of the work items ($1 run, $2 item) a run has counted already: done, nothing to redo.
SELECT i.run_id, i.item
FROM profile.document_expiry_run_items i
JOIN unnest($1::text[], $2::text[]) AS k(run_id, item)
  ON i.run_id = k.run_id AND i.item = k.item;

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
