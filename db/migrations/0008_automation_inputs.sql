-- Automation inputs (seed 003, stage ①): business units, threshold memory, reconciliation
-- watermarks, and the indexes the event path and bounded reconciliation read through.

-- BusinessUnit projection: the time zone every local schedule of the BU is planned in.
CREATE TABLE automation.business_units (
    business_unit_id uuid        PRIMARY KEY,
    time_zone_id     text        NOT NULL,
    version          bigint      NOT NULL,
    updated_on       timestamptz NOT NULL DEFAULT now()
);

-- ThresholdCondition memory per (setting, source): was the condition met at the last
-- evaluation, since when, and which episode (FalseToTrue fires again only after a false).
CREATE TABLE automation.threshold_states (
    setting_guid uuid        NOT NULL,
    source_type  text        NOT NULL,
    source_guid  uuid        NOT NULL,
    met          boolean     NOT NULL,
    met_since    timestamptz,
    episode      text,
    updated_on   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (setting_guid, source_type, source_guid)
);

-- Bounded reconciliation: per provider, the changed-since watermark with its keyset position
-- (the last row done: its UpdatedOn is the watermark); it advances only in the transaction
-- of a successful batch.
CREATE TABLE automation.reconcile_watermarks (
    provider      text        PRIMARY KEY,
    watermark     timestamptz NOT NULL,
    cursor_type   text        NOT NULL DEFAULT '',
    cursor_guid   uuid,
    updated_on    timestamptz NOT NULL DEFAULT now()
);

-- Event path: the settings and sources of a (BU, SourceType); open rows of a source/setting.
CREATE INDEX ix_reminder_settings_bu ON automation.reminder_settings (business_unit_id, source_type);
CREATE INDEX ix_sources_bu ON automation.sources (business_unit_id, source_type);
CREATE INDEX ix_report_subscriptions_bu ON automation.report_subscriptions (business_unit_id);
CREATE INDEX ix_scheduler_open_source ON automation.scheduler (source_type, source_guid)
    WHERE status_id IN ('Pending', 'Failed');
CREATE INDEX ix_scheduler_open_setting ON automation.scheduler (setting_guid)
    WHERE status_id IN ('Pending', 'Failed');
CREATE INDEX ix_scheduler_open_subscription ON automation.scheduler (subscription_guid)
    WHERE status_id IN ('Pending', 'Failed');
-- Reconciliation: active sources changed since the watermark, in keyset order.
CREATE INDEX ix_sources_reconcile ON automation.sources (updated_on, source_type, source_guid)
    WHERE is_active;
