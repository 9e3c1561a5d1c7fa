-- The operators' console (streams/console): rows of a listing by state, in (natural time, id)
-- keyset order, one index range per page whatever the table's size. Only what the existing
-- indexes do not already give, each costing one index entry per write it names:
--
-- calendar.event_reminders: Pending pages read ix_event_reminders_status_due_at (due_at,
-- reminder_id) WHERE Pending, the rows retrying after a failed attempt
-- ix_event_reminders_retry. Sent and Skipped rows need this one; partial, so materializing a
-- Pending row (the ingest path) writes nothing here: only dispatch's Pending → Sent/Skipped
-- update adds an entry (that update changes status, so it is never HOT anyway).
CREATE INDEX ix_event_reminders_console_done
    ON calendar.event_reminders (status, due_at, reminder_id) WHERE status <> 'Pending';

-- automation.scheduler: every status by ScheduledOn. One entry per Ensure insert and per
-- status change (Pending → Processing → Completed: those updates change indexed columns and
-- are not HOT already). Rows on support hold read ix_scheduler_on_hold (few rows).
CREATE INDEX ix_scheduler_console
    ON automation.scheduler (status_id, scheduled_on, scheduler_id);

-- profile.document_expiry_reminders: the markers by RemindedAt (insert-only ledger: one
-- entry per marker written). An owner's markers read ix_document_expiry_reminders_owner.
CREATE INDEX ix_document_expiry_reminders_console
    ON profile.document_expiry_reminders (reminded_at, id);

-- profile.document_expiry_runs: one row a day (and manual runs): ix_document_expiry_runs_started_at
-- is enough.
