-- Periodic-task registry (streams/timers): insert-wins slot claims of cluster-once schedules,
-- and the latest started slot of every schedule so a restarted worker can see missed slots.

-- One row per claimed slot. The primary key is the whole anti-duplicate mechanism: the
-- first INSERT of (name, slot) wins, every other worker's INSERT does nothing.
CREATE TABLE ops.timer_slots (
    name             text             NOT NULL,
    slot             timestamptz      NOT NULL,
    claimed_by       text             NOT NULL,
    run_id           text             NOT NULL,
    claimed_at       timestamptz      NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    -- ok, failed, timeout, cancelled; NULL while running (or if the worker died).
    result           text,
    duration_seconds double precision,
    PRIMARY KEY (name, slot)
);

-- Pruning deletes by age across all schedules.
CREATE INDEX ix_timer_slots_slot ON ops.timer_slots (slot);

CREATE TABLE ops.timer_state (
    name        text        PRIMARY KEY,
    last_slot   timestamptz NOT NULL,
    last_worker text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
