"""Named SQL statements, loaded once from ``db/queries/*.sql`` (``-- name: <name>`` blocks)."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

QUERIES_DIR = Path(__file__).with_name("queries")
_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse(text: str, source: str = "<sql>") -> dict[str, str]:
    """Split a file of ``-- name: x`` blocks into {name: statement}."""
    parts = _NAME.split(text)
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in out:
            raise ValueError(f"{source}: statement {name!r} defined twice")
        statement = body.strip()
        if not statement:
            raise ValueError(f"{source}: statement {name!r} is empty")
        out[name] = statement
    return out


@lru_cache(maxsize=1)
def all_queries() -> dict[str, str]:
    queries: dict[str, str] = {}
    for path in sorted(QUERIES_DIR.glob("*.sql")):
        for name, sql in parse(path.read_text(encoding="utf-8"), path.name).items():
            if name in queries:
                raise ValueError(f"{path.name}: statement {name!r} already defined in another file")
            queries[name] = sql
    return queries


def sql(name: str) -> str:
    """The statement called ``name``; a KeyError names the missing statement."""
    try:
        return all_queries()[name]
    except KeyError:
        raise KeyError(f"no SQL statement named {name!r} in {QUERIES_DIR}") from None
