"""Apply the numbered SQL migrations in ``db/migrations`` once each, safely from many processes."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from db import migration_steps, server
from db.connector import connect
from streams import logs

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
SNAPSHOT = Path(__file__).with_name("schema.snapshot")
SCHEMAS = ("calendar", "profile", "automation", "ops")
# pg_advisory_lock key: "migr" in ASCII. Serialises concurrent migrators.
_LOCK_KEY = 0x6D696772
# Session-level, on the migrator's own connection: kept out of db/queries, whose statements
# run on pooled connections and must leave no session state (tests/unit/test_db_boundary.py).
_LOCK_TRY = "SELECT pg_try_advisory_lock($1)"
_LOCK_RELEASE = "SELECT pg_advisory_unlock($1)"
APPLICATION_NAME = "reminders:migrate"
log = logging.getLogger(__name__)
_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def transactional(self) -> bool:
        """False for a ``-- migrate: no-transaction`` migration (db/migration_steps.py)."""
        return not migration_steps.no_transaction(self.sql)


class MigrationError(Exception):
    pass


def discover(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    found: list[Migration] = []
    for path in sorted(directory.glob("*.sql")):
        m = _FILE.match(path.name)
        if not m:
            raise MigrationError(f"{path.name}: migration files are named NNNN_words.sql")
        migration = Migration(int(m.group(1)), path.name, path.read_text(encoding="utf-8"))
        if not migration.transactional:
            problems = migration_steps.check(path.name, migration_steps.split(migration.sql))
            if problems:
                raise MigrationError("; ".join(problems))
        found.append(migration)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migrations share a number in {directory}")
    return found


async def migrate(
    dsn: str,
    directory: Path = MIGRATIONS_DIR,
    *,
    lock_wait_seconds: float = 300.0,
    lock_timeout_seconds: float = 10.0,
    poll_seconds: float = 1.0,
) -> list[str]:
    """Apply pending migrations; returns the names applied (empty when up to date).

    Migrators take turns on a session advisory lock. One that waits for it says who holds it
    (pid, application_name, since when) and gives up after ``lock_wait_seconds``; each
    statement of a migration waits at most ``lock_timeout_seconds`` for a table lock (a
    long transaction on the table fails the migration with 55P03 instead of queueing every
    query on that table behind it)."""
    migrations = discover(directory)
    conn = await connect(
        dsn,
        server_settings={
            "application_name": APPLICATION_NAME,
            "lock_timeout": str(int(lock_timeout_seconds * 1000)),
        },
    )
    try:
        await _lock(conn, lock_wait_seconds, poll_seconds)
        try:
            return await _apply(conn, migrations)
        except asyncpg.LockNotAvailableError as exc:
            raise MigrationError(
                f"a migration waited longer than lock_timeout ({lock_timeout_seconds:g} s, "
                "DB_MIGRATE_LOCK_TIMEOUT_SECONDS) for a table lock; it was not recorded as "
                "applied (a transactional one left nothing; a no-transaction one runs again "
                "whole), run it again when the transaction holding the table has ended"
            ) from exc
        finally:
            await conn.execute(_LOCK_RELEASE, _LOCK_KEY)
    finally:
        await conn.close()


def _holders_text(holders: list[server.LockHolder]) -> str:
    if not holders:
        return "a session that just released it"
    return ", ".join(
        f"pid={h.pid} application_name={h.application_name or '-'}"
        f" client={h.client_addr or 'local'}"
        f" connected_since={h.backend_start.isoformat() if h.backend_start else '-'}"
        f" state={h.state or '-'}"
        for h in holders
    )


async def _lock(conn: asyncpg.Connection, wait_seconds: float, poll_seconds: float) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    said = ""
    while not await conn.fetchval(_LOCK_TRY, _LOCK_KEY):
        holders = _holders_text(await server.advisory_lock_holders(conn, _LOCK_KEY))
        waited = loop.time() - started
        if waited >= wait_seconds:
            raise MigrationError(
                f"gave up after {waited:.0f} s (DB_MIGRATE_LOCK_WAIT_SECONDS={wait_seconds:g}) "
                f"waiting for the migration lock, held by {holders}"
            )
        if holders != said:  # once per holder, not once per poll
            logs.event(
                log, logging.WARNING, "migrate_lock_wait", waited_seconds=waited, held_by=holders
            )
            said = holders
        await asyncio.sleep(poll_seconds)


async def _apply(conn: asyncpg.Connection, migrations: list[Migration]) -> list[str]:
    await conn.execute(
        """
        CREATE SCHEMA IF NOT EXISTS ops;
        CREATE TABLE IF NOT EXISTS ops.schema_migrations (
            version    integer PRIMARY KEY,
            name       text NOT NULL,
            checksum   text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now()
        );
        """
    )
    rows = await conn.fetch("SELECT version, name, checksum FROM ops.schema_migrations")
    applied = {r["version"]: r for r in rows}
    done: list[str] = []
    for m in migrations:
        row = applied.get(m.version)
        if row is not None:
            if row["checksum"] != m.checksum:
                raise MigrationError(
                    f"{m.name} was changed after it was applied (as {row['name']}); "
                    "add a new migration instead of editing an applied one"
                )
            continue
        if m.transactional:
            async with conn.transaction():
                await conn.execute(m.sql)
                await _record(conn, m)
        else:
            # Each statement on its own (CREATE INDEX CONCURRENTLY refuses a transaction),
            # recorded only once every one succeeded.
            await _run_outside_transaction(conn, m)
            await _record(conn, m)
        done.append(m.name)
    return done


async def _record(conn: asyncpg.Connection, m: Migration) -> None:
    await conn.execute(
        "INSERT INTO ops.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
        m.version,
        m.name,
        m.checksum,
    )


async def _run_outside_transaction(conn: asyncpg.Connection, m: Migration) -> None:
    """Run ``m``'s statements one by one, outside any transaction. A run that was interrupted
    is run again whole: its statements are re-runnable (checked by discover), and an index an
    interrupted concurrent build left INVALID is dropped first, then built again."""
    for statement in migration_steps.split(m.sql):
        build = migration_steps.index_build(statement)
        if build is not None:
            drop = await server.invalid_index(conn, build.schema, build.name)
            if drop is not None:
                logs.event(
                    log,
                    logging.WARNING,
                    "migrate_invalid_index_dropped",
                    migration=m.name,
                    index=f"{build.schema}.{build.name}",
                )
                await conn.execute(drop)
        await conn.execute(statement)


async def describe_schema(conn: asyncpg.Connection) -> str:
    """A stable text description of the project's schemas: tables, columns, indexes, constraints."""
    lines: list[str] = []
    cols = await conn.fetch(
        """
        SELECT table_schema, table_name, column_name, data_type, is_nullable,
               coalesce(column_default, '') AS col_default, coalesce(generation_expression, '') AS gen
        FROM information_schema.columns
        WHERE table_schema = ANY($1::text[])
        ORDER BY table_schema, table_name, ordinal_position
        """,
        list(SCHEMAS),
    )
    for c in cols:
        null = "NULL" if c["is_nullable"] == "YES" else "NOT NULL"
        extra = f" DEFAULT {c['col_default']}" if c["col_default"] else ""
        extra += f" GENERATED {c['gen']}" if c["gen"] else ""
        lines.append(
            f"column {c['table_schema']}.{c['table_name']}.{c['column_name']} "
            f"{c['data_type']} {null}{extra}"
        )
    for i in await conn.fetch(
        "SELECT schemaname, indexdef FROM pg_indexes WHERE schemaname = ANY($1::text[]) "
        "ORDER BY schemaname, indexname",
        list(SCHEMAS),
    ):
        lines.append(f"index {i['indexdef']}")
    for k in await conn.fetch(
        """
        SELECT n.nspname, t.relname, c.conname, pg_get_constraintdef(c.oid) AS def
        FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
        JOIN pg_namespace n ON n.oid = t.relnamespace
        WHERE n.nspname = ANY($1::text[])
        ORDER BY n.nspname, t.relname, c.conname
        """,
        list(SCHEMAS),
    ):
        lines.append(f"constraint {k['nspname']}.{k['relname']}.{k['conname']} {k['def']}")
    for f in await conn.fetch(
        """
        SELECT n.nspname, p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = ANY($1::text[]) ORDER BY 1, 2
        """,
        list(SCHEMAS),
    ):
        lines.append(f"function {f['nspname']}.{f['proname']}")
    for t in await conn.fetch(
        """
        SELECT n.nspname, c.relname, t.tgname FROM pg_trigger t
        JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE NOT t.tgisinternal AND n.nspname = ANY($1::text[]) ORDER BY 1, 2, 3
        """,
        list(SCHEMAS),
    ):
        lines.append(f"trigger {t['nspname']}.{t['relname']}.{t['tgname']}")
    return "\n".join(lines) + "\n"


async def _main(argv: list[str]) -> int:
    from streams.settings import load_settings

    parser = argparse.ArgumentParser(prog="python -m db.migrate", description=__doc__)
    parser.add_argument("--dsn", help="PostgreSQL URL (default: DATABASE_URL setting)")
    parser.add_argument(
        "--write-snapshot", action="store_true", help=f"rewrite {SNAPSHOT.name} from the database"
    )
    args = parser.parse_args(argv)
    settings = load_settings()
    dsn = args.dsn or settings.database_url
    applied = await migrate(
        dsn,
        lock_wait_seconds=settings.db_migrate_lock_wait_seconds,
        lock_timeout_seconds=settings.db_migrate_lock_timeout_seconds,
    )
    print(f"migrations applied: {', '.join(applied) if applied else 'none (up to date)'}")
    if args.write_snapshot:
        conn = await connect(dsn)
        try:
            SNAPSHOT.write_text(await describe_schema(conn), encoding="utf-8")
        finally:
            await conn.close()
        print(f"wrote {SNAPSHOT}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(_main(sys.argv[1:])))
