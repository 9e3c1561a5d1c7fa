-- Automation scheduler (seed 003, stage ②): the one table that says which automation work
-- is due, plus the small projections that execution-time revalidation reads.
--
-- Column names follow the seed (AutomationTypeId → automation_type_id, ...). The *_id
-- enum columns hold the enum names as text (Reminder, DateBased, Pending, ...), checked.
-- The row stays small: no large input, recipient list or rendered output is stored here.

CREATE TABLE automation.scheduler (
    scheduler_id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    automation_type_id          text        NOT NULL
        CHECK (automation_type_id IN ('Reminder', 'ReportSubscription')),
    trigger_type_id             text        NOT NULL
        CHECK (trigger_type_id IN ('DateBased', 'ThresholdCondition', 'Recurring',
                                   'ScheduledRun', 'ManualRun')),
    -- Deterministic business key (streams/domain/automation.py builds it); the idempotency key.
    scheduler_key               text        NOT NULL
        CHECK (char_length(scheduler_key) BETWEEN 1 AND 1024),
    scheduled_on                timestamptz NOT NULL,
    -- The BU's local calendar date and zone the occurrence was planned in (ScheduledOn is UTC).
    scheduled_local_date        date,
    time_zone_id                text,
    status_id                   text        NOT NULL DEFAULT 'Pending'
        CHECK (status_id IN ('Pending', 'Processing', 'Completed', 'Failed', 'Deactivated',
                             'Cancelled')),
    -- Why the row is Deactivated / Cancelled (SourceNoLongerValid, ReminderSettingInactive, ...).
    status_reason_code          text,
    -- Crash protection only, never a worker identity: an expired lease is rescued by cleanup.
    processing_lease_expires_on timestamptz,
    retry_count                 integer     NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    next_retry_on               timestamptz,
    failure_reason_code         text,
    -- A short, value-free error summary (exception class and a safe detail).
    last_error                  text        CHECK (char_length(last_error) <= 500),
    is_on_support_hold          boolean     NOT NULL DEFAULT false,
    -- sha256 of the normalized input + the settings that shape the key.
    input_hash                  text        NOT NULL CHECK (input_hash ~ '^[0-9a-f]{64}$'),
    -- The other hash of an Ensure conflict (same key, different input): the row is held.
    conflict_input_hash         text        CHECK (conflict_input_hash ~ '^[0-9a-f]{64}$'),
    -- Downstream coordinates of the dispatch request + a small summary.
    dispatch_result_json        jsonb       CHECK (pg_column_size(dispatch_result_json) <= 2048),
    -- What the row depends on (revalidation reloads these) and what the dispatch names.
    setting_guid                uuid,
    source_type                 text,
    source_guid                 uuid,
    subscription_guid           uuid,
    -- The last support action (release / retry-key) taken on the row, and how many so far.
    support_action              text,
    support_action_on           timestamptz,
    support_action_count        integer     NOT NULL DEFAULT 0,
    -- Concurrency stamp: every transition increments it; a claim's new Version is its token.
    version                     bigint      NOT NULL DEFAULT 1,
    created_on                  timestamptz NOT NULL DEFAULT now(),
    updated_on                  timestamptz NOT NULL DEFAULT now(),
    -- When a Pending row may be claimed: ScheduledOn <= now AND (NextRetryOn null or <= now)
    -- is exactly due_on <= now (GREATEST ignores NULL). One indexed column keeps the claim a
    -- bounded range scan however many rows are backing off or not yet due.
    due_on                      timestamptz GENERATED ALWAYS AS (GREATEST(scheduled_on, next_retry_on)) STORED,
    CONSTRAINT ux_scheduler_key UNIQUE (scheduler_key),
    CONSTRAINT ck_scheduler_lease
        CHECK ((status_id = 'Processing') = (processing_lease_expires_on IS NOT NULL))
);

-- The claim: claimable rows by due time. Partial, so Completed history, held rows and
-- in-flight rows never enter the scan.
CREATE INDEX ix_scheduler_claimable ON automation.scheduler (due_on)
    WHERE status_id = 'Pending' AND NOT is_on_support_hold;
-- Stale cleanup: Processing rows by lease expiry.
CREATE INDEX ix_scheduler_processing_lease ON automation.scheduler (processing_lease_expires_on)
    WHERE status_id = 'Processing';
-- The support view: rows on hold, newest first.
CREATE INDEX ix_scheduler_on_hold ON automation.scheduler (updated_on)
    WHERE is_on_support_hold;

-- Projections that revalidation reads at execution (PostgreSQL stays authoritative there).
-- Their writers are the automation input agents; each applies a state only when its
-- Version is newer than the stored one.
CREATE TABLE automation.reminder_settings (
    setting_guid            uuid        PRIMARY KEY,
    business_unit_id        uuid        NOT NULL,
    source_type             text        NOT NULL,
    trigger_type            text        NOT NULL,
    trigger_key             text        NOT NULL,
    offsets_days            integer[]   NOT NULL DEFAULT '{}',
    send_time_local         time        NOT NULL,
    threshold_metric_key    text,
    threshold_value         double precision,
    threshold_comparator    text,
    threshold_firing_policy text,
    active                  boolean     NOT NULL,
    version                 bigint      NOT NULL,
    updated_on              timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE automation.sources (
    source_type      text        NOT NULL,
    source_guid      uuid        NOT NULL,
    business_unit_id uuid        NOT NULL,
    is_active        boolean     NOT NULL,
    -- Typed per SourceType: dates (an expiry date), metric inputs (capacity, booked). Small.
    attributes       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    version          bigint      NOT NULL,
    occurred_at      timestamptz NOT NULL,
    updated_on       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_type, source_guid)
);

CREATE TABLE automation.report_subscriptions (
    subscription_guid uuid        PRIMARY KEY,
    business_unit_id  uuid        NOT NULL,
    cron              text,
    period            text,
    active            boolean     NOT NULL,
    version           bigint      NOT NULL,
    updated_on        timestamptz NOT NULL DEFAULT now()
);
