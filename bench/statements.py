"""Where a bench's statement time goes: pg_stat_statements of the bench's database per
statement, before and after a measured window, the largest printed with their calls and the
named statement (db/queries) each one is."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from bench.cpu import tagged
from db.queries import all_queries

PER_STATEMENT = """
SELECT s.queryid, s.calls, s.total_exec_time + s.total_plan_time AS ms, s.query
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = current_database() AND s.query NOT LIKE '%/* bench */%'
"""


@dataclass(frozen=True)
class Statement:
    calls: int
    ms: float
    text: str


Snapshot = dict[int, Statement]


async def snapshot(conn: asyncpg.Connection) -> Snapshot:
    """Every statement of this database so far (empty without pg_stat_statements)."""
    try:
        rows = await conn.fetch(tagged(PER_STATEMENT))
    except (asyncpg.PostgresError, asyncpg.InterfaceError):
        return {}
    return {int(r["queryid"]): Statement(int(r["calls"]), float(r["ms"]), r["query"]) for r in rows}


def _squash(text: str) -> str:
    """``text`` without comments, its white space folded."""
    lines = (line.split("--", 1)[0] for line in text.splitlines())
    return " ".join(" ".join(lines).split())


def name_of(text: str) -> str:
    """The named statement ``text`` is (pg_stat_statements keeps the text from its first
    keyword), or its first words."""
    squashed = _squash(text)
    bodies = {name: _squash(body) for name, body in all_queries().items()}
    for name, body in bodies.items():
        if body == squashed:
            return name
    for name, body in bodies.items():  # pg_stat_statements cuts a long text short
        if body.startswith(squashed[:200]):
            return name
    return squashed[:60]


def lines(before: Snapshot, after: Snapshot, top: int = 8) -> list[str]:
    """The ``top`` statements by time between ``before`` and ``after``, one line each."""
    spent: list[tuple[float, int, str]] = []
    for key, s in after.items():
        was = before.get(key)
        ms = s.ms - (was.ms if was else 0.0)
        calls = s.calls - (was.calls if was else 0)
        if calls:
            spent.append((ms, calls, s.text))
    total = sum(ms for ms, _, _ in spent)
    spent.sort(reverse=True)
    out = [f"statement time {total / 1000:,.1f} s in {sum(c for _, c, _ in spent):,} statements:"]
    for ms, calls, text in spent[:top]:
        out.append(f"  {ms / 1000:7.2f} s {calls:>8,} calls  {name_of(text)}")
    return out
