-- Outbox rows Kafka refused for a reason that will not change by itself (too large for the
-- topic, a topic that does not exist, not authorized): moved here by the relay, out of their
-- lane, so the keys behind them keep flowing. `python -m streams outbox parked|retry|drop`
-- lists them, moves one back to ops.outbox (same id, so the same outbox-id header) or
-- deletes it. A table of its own (not a state column on ops.outbox): the relay's hot
-- statements, the unpublished-row index and retention stay as they are and never see
-- parked rows, and a retried row gets its place in its lane back by its id.
CREATE TABLE ops.outbox_parked (
    id         bigint      PRIMARY KEY,
    topic      text        NOT NULL,
    key        text        NOT NULL,
    payload    json        NOT NULL,
    headers    jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL,
    parked_at  timestamptz NOT NULL,
    -- too_large | unknown_topic | unauthorized | rejected (streams/outbox/parking.py)
    reason     text        NOT NULL,
    -- The Kafka error class and our own words: never a value of the row.
    error      text        NOT NULL,
    refusals   integer     NOT NULL
);

CREATE INDEX ix_outbox_parked_parked_at ON ops.outbox_parked (parked_at);
