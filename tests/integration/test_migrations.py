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
