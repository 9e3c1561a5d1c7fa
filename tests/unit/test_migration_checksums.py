"""An applied migration is never edited: every migration file matches the checksum recorded
when it was added (db/migrations/CHECKSUMS, as `python -m db.migrate` stores them), so an
edit fails here instead of at a deployed database's next migrate."""

from __future__ import annotations

from db.migrate import MIGRATIONS_DIR, discover


def recorded() -> dict[str, str]:
    lines = (MIGRATIONS_DIR / "CHECKSUMS").read_text().splitlines()
    return {name: checksum for checksum, name in (line.split("  ", 1) for line in lines)}


def test_every_migration_matches_its_recorded_checksum() -> None:
    files = {m.name: m.checksum for m in discover()}
    changed = sorted(name for name, checksum in recorded().items() if files.get(name) != checksum)
    assert changed == [], "add a new migration instead of editing (or removing) these"


def test_every_migration_has_a_recorded_checksum() -> None:
    missing = sorted(set(m.name for m in discover()) - set(recorded()))
    assert missing == [], (
        "record a new migration's checksum in db/migrations/CHECKSUMS: "
        "sha256sum db/migrations/NNNN_name.sql"
    )
