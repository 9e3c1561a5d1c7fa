-- Calendar context: the events projection (from pin.calendar.events.v1) and the
-- materialized reminder rows that the dispatch timer turns into reminder-due events.

CREATE TABLE calendar.events (
    event_id                 uuid        PRIMARY KEY,
    tenant_id                uuid        NOT NULL,
    owner_user_id            uuid        NOT NULL,
    client_user_id           uuid,
    kind                     text        NOT NULL,
    start_at                 timestamptz NOT NULL,
    time_zone                text        NOT NULL,
    status                   text        NOT NULL
        CHECK (status IN ('Planned', 'InProgress', 'Completed', 'Cancelled')),
    reminder_offsets_minutes integer[]   NOT NULL DEFAULT '{}',
    appointment_id           uuid,
    version                  bigint      NOT NULL,
    occurred_at              timestamptz NOT NULL,
    updated_at               timestamptz NOT NULL DEFAULT now()
);

-- One row per (event, offset, due time). ReminderId is derived from that identity
-- (uuid5), so a replayed or re-materialized reminder is the same row, never a new one.
CREATE TABLE calendar.event_reminders (
    reminder_id    uuid        PRIMARY KEY,
    event_id       uuid        NOT NULL REFERENCES calendar.events (event_id),
    offset_minutes integer     NOT NULL,
    due_at         timestamptz NOT NULL,
    status         text        NOT NULL DEFAULT 'Pending'
        CHECK (status IN ('Pending', 'Sent', 'Skipped')),
    sent_at        timestamptz,
    skip_reason    text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ux_event_reminders_identity UNIQUE (event_id, offset_minutes, due_at),
    CONSTRAINT ck_event_reminders_sent_at CHECK ((status = 'Sent') = (sent_at IS NOT NULL))
);

-- The dispatch claim: Pending rows by due time. Partial, so it holds only the live
-- work and claim cost does not grow with the Sent/Skipped history.
CREATE INDEX ix_event_reminders_status_due_at
    ON calendar.event_reminders (due_at) WHERE status = 'Pending';
CREATE INDEX ix_event_reminders_event_pending
    ON calendar.event_reminders (event_id) WHERE status = 'Pending';
