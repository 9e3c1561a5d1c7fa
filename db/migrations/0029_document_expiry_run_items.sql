-- Document expiry: the work items whose progress a run has counted. Kafka delivers a work
-- item at least once (a worker that dies after writing its progress and before its offsets
-- are committed has its records delivered again, to a worker that never saw them), so the
-- progress statement counts an item only when it inserts the item's row here: a second
-- delivery adds nothing, and owners_done cannot reach owners_total while owners are left.
-- An item is 'partition:offset' of its record on the owner-work topic, or 'owner:<uuid>'
-- for the last chunk of a large owner's continuations (sent twice when the record that
-- sent the first is delivered again: the owner is done once). Rows go with their run.
CREATE TABLE profile.document_expiry_run_items (
    run_id text NOT NULL REFERENCES profile.document_expiry_runs (run_id) ON DELETE CASCADE,
    item   text NOT NULL,
    PRIMARY KEY (run_id, item)
);
