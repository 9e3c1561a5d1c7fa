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
