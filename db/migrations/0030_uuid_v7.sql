-- Time-ordered UUIDs (RFC 9562 version 7: 48 bits of Unix milliseconds, then random bits),
-- for ids the database makes itself at a high rate. A random (version 4) id sends each
-- insert to a random leaf of its primary key, and of any index that leads with a constant
-- and the id (the console's (reminded_at, id)): as the table grows, every insert dirties a
-- page of its own, written out again and logged whole after each checkpoint. A
-- time-ordered id appends at the right edge instead (the document expiry markers, measured
-- in docs/benchmarks.md).
-- PostgreSQL 18 has uuidv7(); this is the same layout for the versions before it. Inlined by
-- the planner (one SQL expression): about 0.7 us more per id than gen_random_uuid().
CREATE FUNCTION ops.uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(date_part('epoch', clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;
