-- Retention: one bounded batch per statement (the caller repeats until a batch is short),
-- SKIP LOCKED so two runs, or a run and the live path, never wait on each other.

-- name: retention_calendar_events_prune
-- Up to $2 events that started before $1 and have no Pending reminder (a poison row backing
-- off is still live work): their reminders and the events are deleted, and each leaves a
-- tombstone of its Version (pruned at $3) that calendar_events_apply checks. The event row
-- is locked first (FOR UPDATE: an ingest writing the event waits or is passed over), so a
-- new Version cannot slip in between the tombstone and the delete.
WITH doomed AS (
    SELECT e.event_id, e.version, e.occurred_at
    FROM calendar.events e
    WHERE e.start_at < $1
      AND NOT EXISTS (
          SELECT 1 FROM calendar.event_reminders r
          WHERE r.event_id = e.event_id AND r.status = 'Pending')
    ORDER BY e.start_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), tombstoned AS (
    INSERT INTO calendar.event_tombstones AS t (event_id, version, occurred_at, pruned_at)
    SELECT event_id, version, occurred_at, $3 FROM doomed
    ON CONFLICT (event_id) DO UPDATE SET
        version = GREATEST(t.version, EXCLUDED.version),
        occurred_at = GREATEST(t.occurred_at, EXCLUDED.occurred_at),
        pruned_at = EXCLUDED.pruned_at
    RETURNING 1
), reminders AS (
    DELETE FROM calendar.event_reminders r USING doomed d
    WHERE r.event_id = d.event_id
    RETURNING 1
), events AS (
    DELETE FROM calendar.events e USING doomed d
    WHERE e.event_id = d.event_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM events) AS events,
       (SELECT count(*) FROM reminders) AS reminders,
       (SELECT count(*) FROM tombstoned) AS tombstones;

-- name: retention_calendar_tombstones_prune
-- Up to $2 tombstones written before $1 are deleted, and the prune horizon is raised (never
-- lowered) to the latest OccurredAt they held, in the same statement: from then on an input
-- that happened before the horizon is stale.
WITH doomed AS (
    SELECT event_id FROM calendar.event_tombstones
    WHERE pruned_at < $1
    ORDER BY pruned_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM calendar.event_tombstones t USING doomed d
    WHERE t.event_id = d.event_id
    RETURNING t.occurred_at
), raised AS (
    INSERT INTO calendar.event_prune_horizon AS h (singleton, occurred_before)
    SELECT true, max(occurred_at) FROM deleted HAVING count(*) > 0
    ON CONFLICT (singleton) DO UPDATE SET
        occurred_before = GREATEST(h.occurred_before, EXCLUDED.occurred_before)
    RETURNING 1
)
SELECT count(*) FROM deleted;

-- name: retention_scheduler_prune
-- Up to $2 scheduler rows retention may delete (ix_scheduler_prunable's predicate: Deactivated
-- or Cancelled, or Completed of a dated trigger) that were scheduled and last changed
-- before $1. Pending, Processing and Failed rows are live work and never deleted.
WITH doomed AS (
    SELECT scheduler_id FROM automation.scheduler
    WHERE (status_id IN ('Deactivated', 'Cancelled')
           OR (status_id = 'Completed'
               AND trigger_type_id IN ('DateBased', 'Recurring', 'ScheduledRun')))
      AND scheduled_on < $1
      AND updated_on < $1
    ORDER BY scheduled_on
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM automation.scheduler s USING doomed d
    WHERE s.scheduler_id = d.scheduler_id
    RETURNING 1
)
SELECT count(*) FROM deleted;
