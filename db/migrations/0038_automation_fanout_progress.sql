-- Automation fan-out in chunks: a reminder setting (or its BU's time zone) planned over every
-- active source of its (BU, SourceType) is planned a bounded chunk of sources per transaction,
-- in SourceGuid order; the saved position is committed with each chunk.

-- One unfinished fan-out per setting: the last SourceGuid planned (NULL = from the start), the
-- due horizon it ensures up to (NULL = all; reconciliation's window otherwise), and the
-- failures of its chunks (identical ones in a row park it with its reason).
CREATE TABLE automation.fanout_progress (
    setting_guid    uuid        PRIMARY KEY,
    after_guid      uuid,
    horizon         timestamptz,
    setting_version bigint      NOT NULL DEFAULT 0,
    chunks          integer     NOT NULL DEFAULT 0,
    failures        integer     NOT NULL DEFAULT 0,
    last_error      text,
    parked_on       timestamptz,
    requested_on    timestamptz NOT NULL,
    updated_on      timestamptz NOT NULL
);
-- The drainer's queue: unparked fan-outs, least recently advanced first.
CREATE INDEX ix_fanout_progress_due ON automation.fanout_progress (updated_on)
    WHERE parked_on IS NULL;
