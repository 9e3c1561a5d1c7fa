-- The workers of each app, as they announce themselves (a heartbeat every few seconds), so
-- every worker's status page can list the others with a link to theirs.
CREATE TABLE ops.workers (
    worker_id    text        PRIMARY KEY,
    app_id       text        NOT NULL,
    web_url      text        NOT NULL,
    started_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL
);

CREATE INDEX ix_workers_app_seen ON ops.workers (app_id, last_seen_at);
