-- Execution-time delivery configuration of reminder settings (seed 003: recipients,
-- template and channels are resolved when a row is due, not when it is ensured).

-- name: automation_settings_delivery_get
-- The delivery part of ReminderSettings by guid (one statement per executed batch).
SELECT setting_guid, template_id, delivery_channels, recipient_attributes
FROM automation.reminder_settings
WHERE setting_guid = ANY($1::uuid[]);
