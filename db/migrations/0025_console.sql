-- The operators' console (streams/console): who did what to which row, and the timers paused
-- cluster-wide at runtime.
--
-- One row per action asked for, whatever came of it: changed, unchanged (asked again: the
-- actions are idempotent), refused (the row's state does not allow it) or not_found. Written
-- by the action's own statement, in its transaction. The actor is the name the operator gave
-- (never a token); target is the row's key as text.
CREATE TABLE ops.console_audit (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL,
    actor        text        NOT NULL CHECK (char_length(actor) BETWEEN 1 AND 200),
    action       text        NOT NULL,
    listing      text        NOT NULL,
    target       text        NOT NULL,
    reason       text        NOT NULL DEFAULT '' CHECK (char_length(reason) <= 1000),
    outcome      text        NOT NULL
        CHECK (outcome IN ('changed', 'unchanged', 'refused', 'not_found')),
    state_before text,
    state_after  text,
    details      jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX ix_console_audit_target ON ops.console_audit (listing, target, at);
CREATE INDEX ix_console_audit_at ON ops.console_audit (at);

-- A schedule listed here is paused on every worker: its loops skip their runs (counted as
-- paused) until the row is deleted. Read once per run by each registry.
CREATE TABLE ops.timer_pauses (
    schedule  text        PRIMARY KEY,
    paused_at timestamptz NOT NULL,
    paused_by text        NOT NULL,
    reason    text        NOT NULL DEFAULT ''
);
