-- automation.reconcile_watermarks: where each bounded reconciliation provider has got to.

-- name: reconcile_watermarks_get
SELECT provider, watermark, cursor_type, cursor_guid
FROM automation.reconcile_watermarks
WHERE provider = $1;

-- name: reconcile_watermarks_put
-- Written in the transaction of the batch it follows: it advances only if the batch commits.
INSERT INTO automation.reconcile_watermarks AS t (
    provider, watermark, cursor_type, cursor_guid, updated_on)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (provider) DO UPDATE SET
    watermark = EXCLUDED.watermark,
    cursor_type = EXCLUDED.cursor_type,
    cursor_guid = EXCLUDED.cursor_guid,
    updated_on = EXCLUDED.updated_on;
