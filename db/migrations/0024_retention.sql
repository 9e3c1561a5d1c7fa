-- Retention (streams/maintenance/table_retention.py): what pruning needs to stay correct.
--
-- Calendar: an event past its start by the retention is deleted with its reminders, and
-- leaves a tombstone of its Version. calendar_events_apply stores an input only when it is
-- newer than the tombstone, so a replayed or late old Version (the message that comes back a
-- day late) never re-creates the event or its reminders. Tombstones are small and are kept
-- far longer; deleting them raises a durable horizon (never lowered) to the latest
-- OccurredAt they held, and an input that happened before that horizon is stale (the idea
-- of the document-expiry prune horizon, migration 0013).
CREATE TABLE calendar.event_tombstones (
    event_id    uuid        PRIMARY KEY,
    version     bigint      NOT NULL,
    occurred_at timestamptz NOT NULL,
    pruned_at   timestamptz NOT NULL
);
CREATE INDEX ix_event_tombstones_pruned_at ON calendar.event_tombstones (pruned_at);

CREATE TABLE calendar.event_prune_horizon (
    singleton       boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    occurred_before timestamptz NOT NULL
);

-- Events by start, for the prune's bounded batches.
CREATE INDEX ix_events_start_at ON calendar.events (start_at);

-- Scheduler rows retention may delete, by ScheduledOn: Deactivated/Cancelled of any trigger
-- (re-ensuring the key inserts what reactivating the row would have made Pending), Completed
-- only of dated triggers (their keys carry the occurrence date and are ensured from today
-- on, so a past key is never ensured again). Completed threshold and manual-run rows are the
-- dedupe of "fired once" and are kept.
CREATE INDEX ix_scheduler_prunable ON automation.scheduler (scheduled_on)
    WHERE status_id IN ('Deactivated', 'Cancelled')
       OR (status_id = 'Completed' AND trigger_type_id IN ('DateBased', 'Recurring', 'ScheduledRun'));
