"""The migrator's no-transaction path on real PostgreSQL (a migration in a temporary
directory): CREATE INDEX CONCURRENTLY runs statement by statement outside a transaction; the
migration is recorded only after every statement succeeded; a build interrupted midway leaves
an INVALID index that the next run drops and builds again; two migrators at once agree."""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

import asyncpg
import pytest

from db.connector import connect
from db.migrate import MIGRATIONS_DIR, migrate

pytestmark = pytest.mark.integration

PROBE = """-- Two indexes on calendar.events, built without a write lock.
-- migrate: no-transaction

CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_probe_kind ON calendar.events (kind);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ix_probe_tenant
    ON calendar.events (tenant_id);
"""
TENANT = "00000000-0000-0000-0000-00000000000a"


async def _base(url: str, directory: Path) -> None:
    """Migrations 0001-0002 (calendar.events), then the probe as 0099."""
    for m in sorted(MIGRATIONS_DIR.glob("*.sql"))[:2]:
        shutil.copy(m, directory / m.name)
    await migrate(url, directory)
    (directory / "0099_probe_indexes.sql").write_text(PROBE, encoding="utf-8")


async def _query(url: str, sql: str) -> list[asyncpg.Record]:
    conn = await connect(url)
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


async def _indexes(url: str) -> dict[str, bool]:
    rows = await _query(
        url,
        "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c "
        "ON c.oid = i.indexrelid WHERE c.relname LIKE 'ix_probe_%'",
    )
    return {r["relname"]: r["indisvalid"] for r in rows}


async def _recorded(url: str) -> bool:
    rows = await _query(url, "SELECT 1 FROM ops.schema_migrations WHERE version = 99")
    return bool(rows)


async def _events(url: str, tenants: list[str]) -> None:
    conn = await connect(url)
    try:
        for i, tenant in enumerate(tenants):
            await conn.execute(
                "INSERT INTO calendar.events (event_id, tenant_id, owner_user_id, kind, start_at,"
                " time_zone, status, version, occurred_at) VALUES (gen_random_uuid(), $1,"
                " gen_random_uuid(), $2, now(), 'UTC', 'Planned', 1, now())",
                tenant,
                f"k{i}",
            )
    finally:
        await conn.close()


async def test_an_interrupted_concurrent_build_is_dropped_and_built_again(
    empty_database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = empty_database_url
    await _base(url, tmp_path)
    # Two events of one tenant: the unique build fails midway, as an interrupted one would.
    await _events(url, [TENANT, TENANT])
    with pytest.raises(asyncpg.UniqueViolationError):
        await migrate(url, tmp_path)
    # The first statement is done, the second left an INVALID index; nothing is recorded.
    assert await _indexes(url) == {"ix_probe_kind": True, "ix_probe_tenant": False}
    assert not await _recorded(url)
    await _query(url, "DELETE FROM calendar.events WHERE kind = 'k1'")
    with caplog.at_level(logging.WARNING, logger="db.migrate"):
        assert await migrate(url, tmp_path) == ["0099_probe_indexes.sql"]
    assert await _indexes(url) == {"ix_probe_kind": True, "ix_probe_tenant": True}
    assert await _recorded(url)
    assert any(
        "migrate_invalid_index_dropped" in r.getMessage()
        and "calendar.ix_probe_tenant" in r.getMessage()
        for r in caplog.records
    )
    assert await migrate(url, tmp_path) == []


async def test_two_migrators_at_once_build_the_indexes_once(
    empty_database_url: str, tmp_path: Path
) -> None:
    url = empty_database_url
    await _base(url, tmp_path)
    await _events(url, [TENANT])
    results = await asyncio.gather(migrate(url, tmp_path), migrate(url, tmp_path))
    assert sorted(results) == [[], ["0099_probe_indexes.sql"]]
    assert await _indexes(url) == {"ix_probe_kind": True, "ix_probe_tenant": True}
