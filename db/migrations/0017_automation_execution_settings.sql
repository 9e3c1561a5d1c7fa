-- What execution reloads from a ReminderSetting beyond what shapes its keys (seed 003:
-- recipients / template / delivery are resolved when a row is due, so changing them leaves
-- Pending rows untouched). Never read by Ensure or part of an InputHash.
ALTER TABLE automation.reminder_settings
    ADD COLUMN template_id          uuid,
    ADD COLUMN delivery_channels    text[] NOT NULL DEFAULT '{}',
    ADD COLUMN recipient_attributes text[] NOT NULL DEFAULT '{}';
