-- automation.reminder_settings: the ReminderSetting projection (applied only when newer).

-- name: reminder_settings_upsert
-- ReminderSetting states, each applied only when its Version is newer than the stored one.
-- $15..$17: the delivery part execution reloads (template, channels and recipient attribute
-- names as JSON arrays); $18 the Recurrence of a Recurring setting; $19 ImmediateNotification.
INSERT INTO automation.reminder_settings AS t (
    setting_guid, business_unit_id, source_type, trigger_type, trigger_key, offsets_days,
    send_time_local, threshold_metric_key, threshold_value, threshold_comparator,
    threshold_firing_policy, active, version, updated_on, template_id, delivery_channels,
    recipient_attributes, recurrence, immediate_notification)
SELECT u.setting_guid, u.business_unit_id, u.source_type, u.trigger_type, u.trigger_key,
       coalesce((SELECT array_agg(x::int) FROM unnest(string_to_array(u.offsets, ',')) x
                 WHERE x <> ''), '{}'),
       u.send_time_local, u.metric_key, u.threshold_value, u.comparator, u.firing_policy,
       u.active, u.version, $14, u.template_id,
       ARRAY(SELECT jsonb_array_elements_text(u.channels::jsonb)),
       ARRAY(SELECT jsonb_array_elements_text(u.recipient_attributes::jsonb)), u.recurrence,
       u.immediate_notification
FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[],
            $7::time[], $8::text[], $9::float8[], $10::text[], $11::text[], $12::bool[],
            $13::bigint[], $15::uuid[], $16::text[], $17::text[], $18::text[],
            $19::bool[])
     AS u(setting_guid, business_unit_id, source_type, trigger_type, trigger_key, offsets,
          send_time_local, metric_key, threshold_value, comparator, firing_policy, active,
          version, template_id, channels, recipient_attributes, recurrence,
          immediate_notification)
ON CONFLICT (setting_guid) DO UPDATE SET
    business_unit_id = EXCLUDED.business_unit_id,
    source_type = EXCLUDED.source_type,
    trigger_type = EXCLUDED.trigger_type,
    trigger_key = EXCLUDED.trigger_key,
    offsets_days = EXCLUDED.offsets_days,
    send_time_local = EXCLUDED.send_time_local,
    threshold_metric_key = EXCLUDED.threshold_metric_key,
    threshold_value = EXCLUDED.threshold_value,
    threshold_comparator = EXCLUDED.threshold_comparator,
    threshold_firing_policy = EXCLUDED.threshold_firing_policy,
    active = EXCLUDED.active,
    version = EXCLUDED.version,
    updated_on = EXCLUDED.updated_on,
    template_id = EXCLUDED.template_id,
    delivery_channels = EXCLUDED.delivery_channels,
    recipient_attributes = EXCLUDED.recipient_attributes,
    recurrence = EXCLUDED.recurrence,
    immediate_notification = EXCLUDED.immediate_notification
WHERE t.version < EXCLUDED.version
RETURNING t.setting_guid;

-- name: reminder_settings_get_by_guid
-- ReminderSetting states by guid: what planning reads, what revalidation compares and the
-- delivery configuration resolved when a row is executed (one statement per batch).
SELECT setting_guid, business_unit_id, source_type, trigger_type, trigger_key, offsets_days,
       send_time_local, threshold_metric_key, threshold_value, threshold_comparator,
       threshold_firing_policy, active, version, recurrence, immediate_notification,
       template_id, delivery_channels, recipient_attributes
FROM automation.reminder_settings
WHERE setting_guid = ANY($1::uuid[]);

-- name: reminder_settings_of_units
-- Active settings of the given BUs (every SourceType); ix_reminder_settings_bu.
SELECT setting_guid, business_unit_id, source_type, trigger_type, trigger_key, offsets_days,
       send_time_local, threshold_metric_key, threshold_value, threshold_comparator,
       threshold_firing_policy, active, version, recurrence, immediate_notification
FROM automation.reminder_settings
WHERE business_unit_id = ANY($1::uuid[]) AND active;

-- name: reminder_settings_reconcile_page
-- One bounded batch of the settings repair path: active reminder settings of the allowed BUs
-- ($1) changed after the keyset position ($2 watermark, $3 guid) and up to $4 (now minus the
-- settle lag), in (UpdatedOn, SettingGuid) order, LIMIT $5; ix_reminder_settings_reconcile.
SELECT r.setting_guid, r.business_unit_id, r.updated_on
FROM automation.reminder_settings r
WHERE r.active
  AND r.business_unit_id = ANY($1::uuid[])
  AND (r.updated_on, r.setting_guid)
      > ($2::timestamptz, coalesce($3::uuid, '00000000-0000-0000-0000-000000000000'))
  AND r.updated_on <= $4
ORDER BY r.updated_on, r.setting_guid
LIMIT $5;
