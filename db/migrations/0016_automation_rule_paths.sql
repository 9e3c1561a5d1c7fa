-- Automation rules (issue 22): the dispatched-threshold lookup behind the value-free firing
-- policies, and the changed-since scans of the settings and business-unit reconciliation
-- paths.

-- OncePerSource / FalseToTrue: has this (setting, source) a ThresholdCondition row that was
-- already dispatched (Processing or Completed), whatever its threshold value?
CREATE INDEX ix_scheduler_threshold_dispatched
    ON automation.scheduler (setting_guid, source_type, source_guid)
    WHERE trigger_type_id = 'ThresholdCondition' AND status_id IN ('Processing', 'Completed');

-- Reconciliation of reminder settings and business units: changed after the watermark, in
-- keyset order (UpdatedOn, guid).
CREATE INDEX ix_reminder_settings_reconcile
    ON automation.reminder_settings (updated_on, setting_guid);
CREATE INDEX ix_business_units_reconcile
    ON automation.business_units (updated_on, business_unit_id);
