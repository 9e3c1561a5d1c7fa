-- Dispatch retry state of a reminder row (seed 000: a poison row stays Pending). A row that
-- could not make a ReminderDueEvent gets a retry time (bounded exponential backoff), so the
-- claim and the dispatcher's next wake-up pass over it until then instead of meeting it on
-- every run. '-infinity' = no retry pending: the row is claimable from its DueAt on.
ALTER TABLE calendar.event_reminders
    ADD COLUMN attempts        integer     NOT NULL DEFAULT 0,
    ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT '-infinity',
    ADD COLUMN last_error_code text;

-- The claim orders by (due_at, reminder_id): a total order, so the rows a full batch passed
-- over (locked elsewhere) are exactly the unclaimed ones up to its last claimed key.
DROP INDEX calendar.ix_event_reminders_status_due_at;
CREATE INDEX ix_event_reminders_status_due_at
    ON calendar.event_reminders (due_at, reminder_id) WHERE status = 'Pending';

-- Rows backing off after a failed attempt: few, found without reading the due-time index.
CREATE INDEX ix_event_reminders_retry
    ON calendar.event_reminders (next_attempt_at) WHERE status = 'Pending' AND attempts > 0;
