-- Statements on ops.workers: a worker's heartbeat and the list of live workers of an app.

-- name: workers_heartbeat
-- $1 worker id, $2 app id, $3 status page URL, $4 now. Also forgets workers of the app not
-- seen for a day (bounded: the table holds one row per worker process ever started).
WITH gone AS (
    DELETE FROM ops.workers WHERE app_id = $2 AND last_seen_at < $4::timestamptz - interval '1 day'
)
INSERT INTO ops.workers (worker_id, app_id, web_url, started_at, last_seen_at)
VALUES ($1, $2, $3, $4, $4)
ON CONFLICT (worker_id) DO UPDATE
SET web_url = EXCLUDED.web_url, last_seen_at = EXCLUDED.last_seen_at;

-- name: workers_list_live
-- Workers of app $1 seen since $2, oldest first.
SELECT worker_id, web_url, started_at, last_seen_at
FROM ops.workers
WHERE app_id = $1 AND last_seen_at >= $2
ORDER BY started_at, worker_id;
