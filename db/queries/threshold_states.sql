-- automation.threshold_states: the threshold memory of (setting, source) pairs.

-- name: threshold_states_get_by_key
-- Threshold memory of (setting, source) triples. $1 settings, $2 types, $3 guids (parallel).
SELECT t.setting_guid, t.source_type, t.source_guid, t.met, t.met_since, t.episode
FROM automation.threshold_states t
JOIN unnest($1::uuid[], $2::text[], $3::uuid[]) AS k(setting_guid, source_type, source_guid)
  ON t.setting_guid = k.setting_guid AND t.source_type = k.source_type
 AND t.source_guid = k.source_guid;

-- name: threshold_states_put
INSERT INTO automation.threshold_states AS t (
    setting_guid, source_type, source_guid, met, met_since, episode, updated_on)
SELECT u.setting_guid, u.source_type, u.source_guid, u.met, u.met_since, u.episode, $7
FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::bool[], $5::timestamptz[], $6::text[])
     AS u(setting_guid, source_type, source_guid, met, met_since, episode)
ON CONFLICT (setting_guid, source_type, source_guid) DO UPDATE SET
    met = EXCLUDED.met,
    met_since = EXCLUDED.met_since,
    episode = EXCLUDED.episode,
    updated_on = EXCLUDED.updated_on;
