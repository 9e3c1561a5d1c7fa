-- ReminderSetting fields added with the seed-003 providers:
-- - template / channels / recipient attributes: what execution reloads beyond what shapes the
--   keys (resolved when a row is due, so changing them leaves Pending rows untouched); never
--   read by Ensure or part of an InputHash;
-- - recurrence (Yearly / Monthly) of a Recurring setting's target date;
-- - whether a setting asks for an immediate notification besides its scheduled reminders.
ALTER TABLE automation.reminder_settings
    ADD COLUMN template_id          uuid,
    ADD COLUMN delivery_channels    text[] NOT NULL DEFAULT '{}',
    ADD COLUMN recipient_attributes text[] NOT NULL DEFAULT '{}',
    ADD COLUMN recurrence           text CHECK (recurrence IN ('Yearly', 'Monthly')),
    ADD COLUMN immediate_notification boolean NOT NULL DEFAULT false;
