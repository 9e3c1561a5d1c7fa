-- Statements of db/migrate.py around the migration files themselves.

-- name: migration_lock_try
-- The migrators' session advisory lock ($1), without waiting: a migrator that does not get
-- it asks who holds it (advisory_lock_holders) and tries again.
SELECT pg_try_advisory_lock($1);

-- name: migration_lock_release
SELECT pg_advisory_unlock($1);
