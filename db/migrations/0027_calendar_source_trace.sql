-- The W3C trace context of the input that stored an event's current state (streams/tracing):
-- the dispatch claim reads it through the join to calendar.events it already does, so a
-- reminder's output record continues the input's trace. NULL when tracing was off at ingest
-- or the input had no traceparent. Its form (00-<32 hex>-<16 hex>-<2 hex>, 55 characters) is
-- checked in code before it is written (streams.tracing.stored_traceparent); no CHECK here,
-- which would scan the whole table under an exclusive lock. Nullable without a default:
-- adding it rewrites nothing.
ALTER TABLE calendar.events ADD COLUMN source_traceparent text;
