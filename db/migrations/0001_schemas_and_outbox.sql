-- Schemas of the bounded contexts and the one transactional outbox shared by all of them.
CREATE SCHEMA IF NOT EXISTS calendar;
CREATE SCHEMA IF NOT EXISTS profile;
CREATE SCHEMA IF NOT EXISTS automation;
CREATE SCHEMA IF NOT EXISTS ops;

-- One row = one integration event to publish. Written in the same transaction as the
-- state change it announces; published by the relay (streams/outbox/relay.py).
CREATE TABLE ops.outbox (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic        text        NOT NULL,
    key          text        NOT NULL,
    -- json (not jsonb) keeps the exact bytes the contract model produced.
    payload      json        NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- Rows of one key always share a lane; a lane is published by one relay at a
    -- time, in id order, which is what keeps per-key order with several relays.
    lane         smallint    GENERATED ALWAYS AS ((hashtext(key) & 63)::smallint) STORED,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz
);

CREATE INDEX ix_outbox_unpublished ON ops.outbox (lane, id) WHERE published_at IS NULL;
CREATE INDEX ix_outbox_published_at ON ops.outbox (published_at) WHERE published_at IS NOT NULL;

-- Wake the relay as soon as rows commit (it falls back to polling if a NOTIFY is missed).
CREATE FUNCTION ops.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ops_outbox', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER tr_outbox_notify AFTER INSERT ON ops.outbox
    FOR EACH STATEMENT EXECUTE FUNCTION ops.outbox_notify();
