"""Migrations that run outside a transaction (``-- migrate: no-transaction``): the directive,
the split into statements, the rules their statements follow, the indexes they build.

A migration that builds an index on a large table must not hold a write lock for the build:
``CREATE INDEX CONCURRENTLY`` takes none, but cannot run inside a transaction. Such a
migration starts with the directive among its leading comment lines; the migrator then runs
its statements one by one, each on its own, and records the migration applied only after the
last succeeded. An interrupted run is run again whole, so every statement must be re-runnable:
``CREATE INDEX CONCURRENTLY IF NOT EXISTS`` (an INVALID index an interrupted build left behind
is dropped and built again by the migrator) and ``DROP INDEX CONCURRENTLY IF EXISTS``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DIRECTIVE = "-- migrate: no-transaction"

_CREATE_INDEX = re.compile(r"CREATE\s+(?:UNIQUE\s+)?INDEX\b", re.I)
_CONCURRENT_CREATE = re.compile(
    r"CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+(?P<name>\w+)\s+"
    r"ON\s+(?:ONLY\s+)?(?:(?P<schema>\w+)\.)?(?P<table>\w+)",
    re.I,
)
_DROP_INDEX = re.compile(r"DROP\s+INDEX\b", re.I)
_CONCURRENT_DROP = re.compile(r"DROP\s+INDEX\s+CONCURRENTLY\s+IF\s+EXISTS\b", re.I)
_CREATE_TABLE = re.compile(
    r"CREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([\w.]+)", re.I
)
_INDEX_ON = re.compile(
    r"CREATE\s+(?:UNIQUE\s+)?INDEX\s+(?!CONCURRENTLY)(?:IF\s+NOT\s+EXISTS\s+)?\w*\s*ON\s+"
    r"(?:ONLY\s+)?([\w.]+)",
    re.I,
)


@dataclass(frozen=True)
class IndexBuild:
    """The index a ``CREATE INDEX CONCURRENTLY IF NOT EXISTS`` statement builds."""

    schema: str
    name: str


def no_transaction(sql: str) -> bool:
    """True when the directive stands among the file's leading comment lines."""
    for line in sql.splitlines():
        text = line.strip()
        if not text:
            continue
        if not text.startswith("--"):
            return False
        if text.lower() == DIRECTIVE:
            return True
    return False


def split(sql: str) -> list[str]:
    """The statements of ``sql`` (comments kept with the statement they precede), split at
    semicolons outside comments, quoted strings, quoted names and dollar-quoted bodies."""
    statements: list[str] = []
    start = i = 0
    n = len(sql)
    while i < n:
        c = sql[i]
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c in "'\"":
            end = i + 1
            while True:
                end = sql.find(c, end)
                if end < 0:
                    end = n
                    break
                if sql.startswith(c * 2, end):
                    end += 2
                    continue
                break
            i = end + 1
        elif c == "$" and (m := re.match(r"\$(?:[A-Za-z_]\w*)?\$", sql[i:])):
            tag = m.group(0)
            end = sql.find(tag, i + len(tag))
            i = n if end < 0 else end + len(tag)
        elif c == ";":
            statements.append(sql[start : i + 1])
            start = i = i + 1
        else:
            i += 1
    statements.append(sql[start:])
    return [s.strip() for s in statements if _code(s)]


def _code(statement: str) -> str:
    """``statement`` without its comments, stripped (empty for a comment-only chunk)."""
    text = re.sub(r"/\*.*?\*/", " ", statement, flags=re.S)
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines()).strip()


def check(name: str, statements: list[str]) -> list[str]:
    """Why the statements of no-transaction migration ``name`` cannot be run again after an
    interruption (empty when they can)."""
    problems: list[str] = []
    for statement in statements:
        code = _code(statement)
        first = " ".join(code.split()[:6])
        if _CREATE_INDEX.match(code) and not _CONCURRENT_CREATE.match(code):
            problems.append(
                f"{name}: {first}...: write CREATE INDEX CONCURRENTLY IF NOT EXISTS "
                "name ON schema.table (re-runnable, no write lock)"
            )
        if _DROP_INDEX.match(code) and not _CONCURRENT_DROP.match(code):
            problems.append(f"{name}: {first}...: write DROP INDEX CONCURRENTLY IF EXISTS")
    return problems


def index_build(statement: str) -> IndexBuild | None:
    """The index ``statement`` builds concurrently (its schema is its table's; public when the
    table is not qualified), or None for any other statement."""
    m = _CONCURRENT_CREATE.match(_code(statement))
    if m is None:
        return None
    return IndexBuild(m.group("schema") or "public", m.group("name"))


def blocking_index_builds(sql: str) -> list[str]:
    """The tables a migration indexes with a plain ``CREATE INDEX`` (a write lock for the whole
    build), except tables the same migration creates (new, hence empty)."""
    code = "\n".join(_code(s) for s in split(sql))
    created = {t.lower() for t in _CREATE_TABLE.findall(code)}
    return [t for t in _INDEX_ON.findall(code) if t.lower() not in created]
