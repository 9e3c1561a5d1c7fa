-- migrate: no-transaction
-- The console's filters (streams/console/listing.py), each served by an index so that a value
-- matching nothing costs an index probe, not a scan of every row of a state:
--
-- automation.scheduler by business unit: the unit's reminder settings and report
-- subscriptions (ix_reminder_settings_bu, ix_report_subscriptions_bu), then each one's rows
-- of a status in (ScheduledOn, SchedulerId) order. A reminder row names its setting, a report
-- row its subscription: one expression covers both. One entry per insert and per status
-- change (those updates change indexed columns already: not HOT).
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_scheduler_console_owner
    ON automation.scheduler ((coalesce(setting_guid, subscription_guid)), status_id,
                             scheduled_on, scheduler_id);

-- automation.scheduler by SchedulerKey prefix: a byte-order range of the key within a status
-- (collation "C", whatever the database's: a prefix is then one range).
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_scheduler_console_key
    ON automation.scheduler (status_id, scheduler_key COLLATE "C");

-- calendar reminders by owner: the owner's events, then each event's reminders
-- (ux_event_reminders_identity). One entry per event written; an update that keeps the owner
-- stays HOT-eligible. Each built without a write lock (this file runs outside a transaction).
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_events_owner ON calendar.events (owner_user_id);
