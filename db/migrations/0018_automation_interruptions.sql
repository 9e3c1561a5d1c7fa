-- Claims that ended without a verdict (issue 21, finding 5): the runner gave its rows back
-- after a transient database error or a cancelled run, or stale cleanup found the lease
-- expired (the claimant died or stalled). An interruption is not a failed attempt: it does
-- not move RetryCount / the backoff ladder while interrupted_count is within the allowance
-- (streams/domain/automation.py: interruption_plan); past it, each one counts as an attempt,
-- so a row that kills its worker every time still ends on support hold.
ALTER TABLE automation.scheduler
    ADD COLUMN interrupted_count   integer NOT NULL DEFAULT 0 CHECK (interrupted_count >= 0),
    ADD COLUMN last_interrupted_on timestamptz;
