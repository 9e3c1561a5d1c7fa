"""Migrations: a fresh migrate equals the recorded schema, twice is a no-op, concurrent runs agree."""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

import pytest

from db.connector import connect
from db.migrate import MIGRATIONS_DIR, SNAPSHOT, MigrationError, describe_schema, discover, migrate
from devkit.workers import ROOT

pytestmark = pytest.mark.integration


async def schema_of(url: str) -> str:
    conn = await connect(url)
    try:
        return await describe_schema(conn)
    finally:
        await conn.close()


async def test_fresh_migrate_matches_snapshot_and_second_run_is_a_no_op(
    empty_database_url: str,
) -> None:
    applied = await migrate(empty_database_url)
    assert applied == [m.name for m in discover()]
    schema = await schema_of(empty_database_url)
    assert schema == SNAPSHOT.read_text(), (
        "schema drifted from db/schema.snapshot: run `make schema`"
    )
    assert await migrate(empty_database_url) == []
    assert await schema_of(empty_database_url) == schema


async def test_two_concurrent_migrate_processes_both_succeed(empty_database_url: str) -> None:
    async def run() -> tuple[int, bytes]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "db.migrate",
            "--dsn",
            empty_database_url,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        return proc.returncode or 0, out

    (rc1, out1), (rc2, out2) = await asyncio.gather(run(), run())
    assert (rc1, rc2) == (0, 0), (out1, out2)
    # Exactly one of them applied the migrations; the other found them applied.
    assert sorted([b"none (up to date)" in out1, b"none (up to date)" in out2]) == [False, True]
    assert await schema_of(empty_database_url) == SNAPSHOT.read_text()


async def test_editing_an_applied_migration_is_refused(
    empty_database_url: str, tmp_path: Path
) -> None:
    copy = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, copy)
    await migrate(empty_database_url, copy)
    first = sorted(copy.glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- edited\n")
    with pytest.raises(MigrationError, match="changed after it was applied"):
        await migrate(empty_database_url, copy)


async def test_a_migrator_waiting_for_the_lock_names_its_holder_and_gives_up(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The old migrator waited on pg_advisory_lock without a bound and without a word."""
    from db.migrate import _LOCK_KEY

    holder = await connect(database_url, server_settings={"application_name": "held-by-a-test"})
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
        pid = await holder.fetchval("SELECT pg_backend_pid()")
        with pytest.raises(MigrationError) as raised:
            await asyncio.wait_for(
                migrate(database_url, lock_wait_seconds=0.5, poll_seconds=0.1), timeout=30
            )
        message = str(raised.value)
        assert f"pid={pid} application_name=held-by-a-test" in message
        assert "DB_MIGRATE_LOCK_WAIT_SECONDS" in message
        waits = [r.getMessage() for r in caplog.records if "migrate_lock_wait" in r.getMessage()]
        assert len(waits) == 1 and f"pid={pid} application_name=held-by-a-test" in waits[0]
        await holder.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
        assert await migrate(database_url, lock_wait_seconds=0.5) == []  # its turn now
    finally:
        await holder.close()


async def test_a_migration_waits_for_a_table_lock_only_for_lock_timeout(
    empty_database_url: str, tmp_path: Path
) -> None:
    for m in sorted(MIGRATIONS_DIR.glob("*.sql"))[:2]:
        shutil.copy(m, tmp_path / m.name)
    await migrate(empty_database_url, tmp_path)
    (tmp_path / "0099_touch_events.sql").write_text(
        "ALTER TABLE calendar.events ADD COLUMN lock_probe integer;\n", encoding="utf-8"
    )
    reader = await connect(empty_database_url)
    try:
        tx = reader.transaction()
        await tx.start()
        await reader.fetch("SELECT * FROM calendar.events")  # holds ACCESS SHARE until the end
        with pytest.raises(MigrationError, match="lock_timeout"):
            await asyncio.wait_for(
                migrate(empty_database_url, tmp_path, lock_timeout_seconds=0.3), timeout=30
            )
        await tx.rollback()
    finally:
        await reader.close()
    assert await migrate(empty_database_url, tmp_path) == ["0099_touch_events.sql"]
