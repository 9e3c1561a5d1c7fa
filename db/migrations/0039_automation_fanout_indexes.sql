-- migrate: no-transaction
-- A fan-out chunk (0038) reads its sources and its open rows as one keyset range of
-- SourceGuid: the indexes of the whole-scope reads gain the guid (same partial predicate, so
-- no extra index to keep). Built beside the old ones without a write lock, then those dropped.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_sources_bu_guid
    ON automation.sources (business_unit_id, source_type, source_guid);
DROP INDEX CONCURRENTLY IF EXISTS automation.ix_sources_bu;
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_scheduler_open_setting_source
    ON automation.scheduler (setting_guid, source_guid)
    WHERE status_id IN ('Pending', 'Failed');
DROP INDEX CONCURRENTLY IF EXISTS automation.ix_scheduler_open_setting;
