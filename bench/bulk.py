"""Loading millions of rows fast: drop the tables' keys and indexes, insert, build them again.

Inserting 10,000,000 rows through five random-UUID B-trees and a foreign-key check per row
takes about ten minutes here; building the same indexes after the load takes a fraction of
that. The definitions are read from the catalog before they are dropped and compared after
they are rebuilt, so the measured database has exactly the schema the migrations made.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import asyncpg

from bench.progress import Progress

CONSTRAINTS = """
SELECT conname, conrelid::regclass::text AS rel, contype::text AS kind,
       pg_get_constraintdef(oid) AS def
FROM pg_constraint
WHERE conrelid = ANY($1::regclass[]) AND contype IN ('p', 'u', 'f')
ORDER BY conrelid::regclass::text, conname
"""
# Indexes that no constraint owns (constraints bring their own back).
INDEXES = """
SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS def
FROM pg_index i
WHERE i.indrelid = ANY($1::regclass[])
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
ORDER BY 1
"""


async def _schema(conn: asyncpg.Connection, tables: Sequence[str]) -> list[tuple[str, ...]]:
    cons = await conn.fetch(CONSTRAINTS, list(tables))
    idx = await conn.fetch(INDEXES, list(tables))
    return [(c["rel"], c["conname"], c["kind"], c["def"]) for c in cons] + [
        ("index", i["name"], "i", i["def"]) for i in idx
    ]


@asynccontextmanager
async def without_indexes(
    conn: asyncpg.Connection, tables: Sequence[str], label: str = "building indexes"
) -> AsyncIterator[None]:
    """Inside: ``tables`` have no keys, unique constraints, foreign keys or indexes. After:
    all of them are back (primary and unique keys, then indexes, then foreign keys, which
    also checks every row's reference once), identical to before."""
    before = await _schema(conn, tables)
    cons = [s for s in before if s[2] != "i"]
    idx = [s for s in before if s[2] == "i"]
    await conn.execute("SET maintenance_work_mem = '512MB'")
    for rel, name, _, _ in sorted(cons, key=lambda s: s[2] != "f"):  # foreign keys first
        await conn.execute(f'ALTER TABLE {rel} DROP CONSTRAINT "{name}"')
    for _, name, _, _ in idx:
        await conn.execute(f"DROP INDEX {name}")
    yield
    steps = [s for s in cons if s[2] != "f"] + idx + [s for s in cons if s[2] == "f"]
    with Progress(label, total=len(steps), unit="keys and indexes") as progress:
        for rel, name, kind, definition in steps:
            if kind == "i":
                await conn.execute(definition)
            else:
                await conn.execute(f'ALTER TABLE {rel} ADD CONSTRAINT "{name}" {definition}')
            progress.advance()
    after = await _schema(conn, tables)
    if sorted(after) != sorted(before):
        raise RuntimeError(f"schema differs after the bulk load: {before} vs {after}")
