-- An effect is never re-created after its record is gone. Retention deletes Completed dated
-- scheduler rows a while after their ScheduledOn, but a key can still be named after that:
-- an immediate notification's key is planned as long as its target date is ahead, whatever
-- the day it was sent. The statement that deletes a Completed row writes this compact record
-- of it (the seed keeps Completed rows for history), and Ensure consults it: a key here is
-- AlreadyCompleted and is never inserted again. Kept as long as the table: no input is bounded
-- in time to stop naming a key.
CREATE TABLE automation.scheduler_history (
    scheduler_key        text        PRIMARY KEY,
    scheduler_id         bigint      NOT NULL,
    scheduled_on         timestamptz NOT NULL,
    completed_on         timestamptz NOT NULL,
    dispatch_result_json jsonb
);

-- Operator decisions are terminal: a console cancel (ReasonCode ManualCancel) is no longer
-- prunable, so neither Ensure nor retention can undo it; the console's reopen can. Deactivated
-- rows and the system's own cancellations go as before (re-ensuring such a key inserts what
-- reactivating the row would have made Pending).
DROP INDEX automation.ix_scheduler_prunable;
CREATE INDEX ix_scheduler_prunable ON automation.scheduler (scheduled_on)
    WHERE status_id = 'Deactivated'
       OR (status_id = 'Cancelled' AND status_reason_code IS DISTINCT FROM 'ManualCancel')
       OR (status_id = 'Completed' AND trigger_type_id IN ('DateBased', 'Recurring', 'ScheduledRun'));
