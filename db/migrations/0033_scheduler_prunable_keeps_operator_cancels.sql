-- migrate: no-transaction
-- Operator decisions are terminal: a console cancel (ReasonCode ManualCancel) is no longer
-- prunable, so neither Ensure nor retention can undo it; the console's reopen can. Deactivated
-- rows and the system's own cancellations go as before (re-ensuring such a key inserts what
-- reactivating the row would have made Pending). Built beside the old index without a write
-- lock, then swapped in under the old name.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_scheduler_prunable_v2 ON automation.scheduler (scheduled_on)
    WHERE status_id = 'Deactivated'
       OR (status_id = 'Cancelled' AND status_reason_code IS DISTINCT FROM 'ManualCancel')
       OR (status_id = 'Completed' AND trigger_type_id IN ('DateBased', 'Recurring', 'ScheduledRun'));
DROP INDEX CONCURRENTLY IF EXISTS automation.ix_scheduler_prunable;
ALTER INDEX IF EXISTS automation.ix_scheduler_prunable_v2 RENAME TO ix_scheduler_prunable;
