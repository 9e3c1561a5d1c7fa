-- automation.fanout_progress: the unfinished fan-outs of reminder settings over their
-- (BU, SourceType)'s sources, each at the last SourceGuid a committed chunk planned.

-- name: fanout_progress_request
-- Start (or restart) the fan-out of settings ($1) from the first source: a newer state of a
-- setting supersedes its unfinished fan-out. $2 the due horizon (NULL = every row); an
-- unbounded request or an unbounded fan-out in progress stays unbounded.
INSERT INTO automation.fanout_progress AS t (
    setting_guid, after_guid, horizon, setting_version, requested_on, updated_on)
SELECT g, NULL, $2, COALESCE(s.version, 0), $3, $3
FROM (SELECT DISTINCT g FROM unnest($1::uuid[]) AS g ORDER BY g) AS k
LEFT JOIN automation.reminder_settings s ON s.setting_guid = k.g
ON CONFLICT (setting_guid) DO UPDATE SET
    after_guid = NULL,
    horizon = CASE WHEN t.horizon IS NULL OR EXCLUDED.horizon IS NULL THEN NULL
                   ELSE greatest(t.horizon, EXCLUDED.horizon) END,
    setting_version = EXCLUDED.setting_version,
    chunks = 0,
    failures = 0,
    last_error = NULL,
    parked_on = NULL,
    requested_on = EXCLUDED.requested_on,
    updated_on = EXCLUDED.updated_on;

-- name: fanout_progress_get
-- The fan-outs of settings ($1), in SettingGuid order.
SELECT setting_guid, after_guid, horizon, setting_version, chunks, failures, last_error,
       parked_on
FROM automation.fanout_progress
WHERE setting_guid = ANY($1::uuid[])
ORDER BY setting_guid;

-- name: fanout_progress_next_due
-- The drainer's next fan-outs (not parked), least recently advanced first, with the BU their
-- setting is in now (the lock a chunk takes); LIMIT $1. ix_fanout_progress_due.
SELECT p.setting_guid, s.business_unit_id
FROM automation.fanout_progress p
LEFT JOIN automation.reminder_settings s ON s.setting_guid = p.setting_guid
WHERE p.parked_on IS NULL
ORDER BY p.updated_on, p.setting_guid
LIMIT $1;

-- name: fanout_progress_advance
-- A chunk committed: its last SourceGuid ($2) is where the next one starts.
UPDATE automation.fanout_progress
SET after_guid = $2, chunks = chunks + 1, failures = 0, last_error = NULL, updated_on = $3
WHERE setting_guid = $1;

-- name: fanout_progress_done
-- The last chunk committed: the fan-out is finished.
DELETE FROM automation.fanout_progress WHERE setting_guid = $1;

-- name: fanout_progress_failed
-- A chunk failed ($2 its value-free reason): the same reason again counts one more failure
-- in a row, another starts the count again; at $3 in a row the fan-out is parked.
UPDATE automation.fanout_progress AS t
SET failures = f.n,
    last_error = $2,
    parked_on = CASE WHEN f.n >= $3 THEN $4::timestamptz END,
    updated_on = $4
FROM (SELECT CASE WHEN last_error = $2 THEN failures + 1 ELSE 1 END AS n
      FROM automation.fanout_progress WHERE setting_guid = $1) AS f
WHERE t.setting_guid = $1
RETURNING t.failures, t.parked_on;

-- name: fanout_progress_release
-- Operators: parked fan-outs of settings ($1) start again where they stopped.
UPDATE automation.fanout_progress
SET parked_on = NULL, failures = 0, last_error = NULL, updated_on = $2
WHERE setting_guid = ANY($1::uuid[]) AND parked_on IS NOT NULL
RETURNING setting_guid;

-- name: fanout_progress_counts
-- Unfinished and parked fan-outs (/status).
SELECT count(*) FILTER (WHERE parked_on IS NULL) AS unfinished,
       count(*) FILTER (WHERE parked_on IS NOT NULL) AS parked
FROM automation.fanout_progress;

-- name: fanout_progress_parked
-- Parked fan-outs with their reasons, oldest first, LIMIT $1 (the support command).
SELECT setting_guid, after_guid, horizon, setting_version, chunks, failures, last_error,
       parked_on
FROM automation.fanout_progress
WHERE parked_on IS NOT NULL
ORDER BY parked_on, setting_guid
LIMIT $1;
