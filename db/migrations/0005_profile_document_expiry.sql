-- Profile context (seed 001, DocumentExpiryReminderJob): the read-only projection of person
-- documents (from pin.profile.person-documents.v1, open columns only), the insert-wins
-- ledger of sent expiry reminders, and one row per run for its counts.

-- Open columns only: PayloadCipher is never stored (the contract does not even parse it).
CREATE TABLE profile.person_documents (
    document_id   uuid        PRIMARY KEY,
    owner_user_id uuid        NOT NULL,
    person_id     uuid        NOT NULL,
    type          varchar(32) NOT NULL,
    number_mask   varchar(64),
    expires_at    date,
    status        text        NOT NULL CHECK (status IN ('Active', 'Archived')),
    is_deleted    boolean     NOT NULL DEFAULT false,
    version       bigint      NOT NULL,
    occurred_at   timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- The seed's partial index for the run's scan; document_id makes (expires_at, document_id)
-- a keyset, so the scan pages in ExpiresAt order without OFFSET.
CREATE INDEX ix_person_documents_expires_at
    ON profile.person_documents (expires_at, document_id) WHERE expires_at IS NOT NULL;
-- An owner's documents in the window (the per-owner worker's read).
CREATE INDEX ix_person_documents_owner
    ON profile.person_documents (owner_user_id) WHERE expires_at IS NOT NULL;

-- One row = "the reminder for (document, threshold) was sent". The unique index is the whole
-- arbiter between instances (INSERT ... ON CONFLICT DO NOTHING: insert-wins).
CREATE TABLE profile.document_expiry_reminders (
    id             uuid        PRIMARY KEY,
    document_id    uuid        NOT NULL,
    owner_user_id  uuid        NOT NULL,
    type           varchar(32) NOT NULL,
    threshold_days integer     NOT NULL CHECK (threshold_days >= 0),
    -- A copy of the document's ExpiresAt when it was marked: what pruning goes by.
    expires_at     date        NOT NULL,
    reminded_at    timestamptz NOT NULL
);

CREATE UNIQUE INDEX ux_document_expiry_reminders_dedupe
    ON profile.document_expiry_reminders (document_id, threshold_days);
CREATE INDEX ix_document_expiry_reminders_owner
    ON profile.document_expiry_reminders (owner_user_id);
CREATE INDEX ix_document_expiry_reminders_expires_at
    ON profile.document_expiry_reminders (expires_at);

-- One row per run (scheduled or manual): the owners it handed out and what the per-owner
-- workers, wherever they run, did with them. The run waits on owners_done = owners_total.
CREATE TABLE profile.document_expiry_runs (
    run_id                 text        PRIMARY KEY,
    slot                   timestamptz NOT NULL,
    as_of_date             date        NOT NULL,
    thresholds             integer[]   NOT NULL,
    started_at             timestamptz NOT NULL,
    owners_total           integer,
    owners_done            integer     NOT NULL DEFAULT 0,
    owners_failed          integer     NOT NULL DEFAULT 0,
    owners_notified        integer     NOT NULL DEFAULT 0,
    reminders_sent         integer     NOT NULL DEFAULT 0,
    skipped_already_marked integer     NOT NULL DEFAULT 0,
    pruned                 integer,
    backlog                integer,
    finished_at            timestamptz,
    duration_ms            double precision
);

CREATE INDEX ix_document_expiry_runs_started_at ON profile.document_expiry_runs (started_at);
