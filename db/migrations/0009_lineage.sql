-- Lineage for `explain`: which input message produced a row, and where its event went out.
-- Ids and offsets only (never payloads), written by the statements that already run per
-- batch, so the hot path gains no statement.
ALTER TABLE calendar.events
    ADD COLUMN source_partition integer,
    ADD COLUMN source_offset    bigint;

ALTER TABLE calendar.event_reminders
    ADD COLUMN source_partition integer,
    ADD COLUMN source_offset    bigint,
    ADD COLUMN source_version   bigint;

ALTER TABLE ops.outbox
    ADD COLUMN published_partition integer,
    ADD COLUMN published_offset    bigint;

-- explain finds the outbox records of an entity by key within the retention window.
CREATE INDEX ix_outbox_key ON ops.outbox (key);
