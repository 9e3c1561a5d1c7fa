"""The database boundary has one shape: named statements in db/queries/<table>.sql (one file
per table or tightly-coupled table family), one repository db/<table>.py whose functions run
one statement each, named <table>_<function>, and no SQL or driver in streams/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from db.queries import QUERIES_DIR, parse

ROOT = Path(__file__).resolve().parents[2]
TABLES = sorted(path.stem for path in QUERIES_DIR.glob("*.sql"))
# Modules that also run a file's statements without mirroring them: the server's health ping
# and session planning run where connections are opened.
ALSO_RUN_BY = {"server": ["connector"]}
# Per statement file, the repository modules that run its statements (the first mirrors them).
MIRRORED = {table: [table, *ALSO_RUN_BY.get(table, [])] for table in TABLES}
SQL_TEXT = re.compile(r"\b(SELECT\s|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)", re.I)
# The startup probe tells a refused login from an absent server by asyncpg's error types.
DRIVER_ALLOWED = {"streams/startup_wait.py"}


def _sql_calls(fn: ast.AST) -> list[str]:
    return [
        node.args[0].value
        for node in ast.walk(fn)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "sql"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]


def _functions(module: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse((ROOT / "db" / f"{module}.py").read_text())
    return [fn for fn in tree.body if isinstance(fn, ast.AsyncFunctionDef | ast.FunctionDef)]


@pytest.mark.parametrize("table", TABLES)
def test_each_statement_has_one_function_named_after_it(table: str) -> None:
    path = QUERIES_DIR / f"{table}.sql"
    statements = set(parse(path.read_text(), path.name))
    assert (ROOT / "db" / f"{table}.py").exists(), f"{path.name} has no repository db/{table}.py"
    used: set[str] = set()
    for fn in _functions(table):
        calls = _sql_calls(fn)
        if not calls:
            continue
        assert len(calls) == 1, f"{table}: {fn.name} runs {calls}: one statement each"
        assert calls[0] == f"{table}_{fn.name}", (
            f"{table}: {fn.name} runs {calls[0]}; name it after its statement"
        )
        used.add(calls[0])
    for module in ALSO_RUN_BY.get(table, []):
        for fn in _functions(module):
            used |= set(_sql_calls(fn)) & statements
    assert statements == used, f"statements without a function: {sorted(statements - used)}"


def test_only_a_tables_repository_runs_its_statements() -> None:
    offenders = []
    for path in sorted((ROOT / "db").glob("*.py")):
        runners = {table for table, modules in MIRRORED.items() if path.stem in modules}
        for name in _sql_calls(ast.parse(path.read_text())):
            if not any(name.startswith(f"{table}_") for table in runners):
                offenders.append(f"db/{path.name}: {name}")
    assert offenders == []


def _python_files(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py"))


def test_no_sql_text_in_streams() -> None:
    offenders = []
    for path in _python_files("streams"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and SQL_TEXT.search(node.value)
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_streams_does_not_import_the_driver() -> None:
    offenders = []
    for path in _python_files("streams"):
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n.split(".")[0] == "asyncpg" for n in names) and rel not in DRIVER_ALLOWED:
                offenders.append(rel)
    assert offenders == []


def test_streams_opens_connections_only_through_the_port() -> None:
    # db.connector.connection()/transaction() translate driver errors; a bare acquire() would not.
    offenders = [
        str(path.relative_to(ROOT))
        for path in _python_files("streams")
        if ".acquire(" in path.read_text()
    ]
    assert offenders == []


def _imports_from(folder: str, packages: tuple[str, ...]) -> list[str]:
    offenders = []
    for path in _python_files(folder):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n.split(".")[0] in packages for n in names):
                offenders.append(str(path.relative_to(ROOT)))
    return offenders


def test_bench_does_not_import_tests() -> None:
    assert _imports_from("bench", ("tests",)) == []


def test_devkit_imports_neither_tests_nor_bench() -> None:
    # devkit/ is the one home of shared helpers: tests and bench import it, never the reverse.
    assert _imports_from("devkit", ("tests", "bench")) == []


# Session-level state a pooled connection would carry to its next user: the pool runs no
# reset query on release (db/connector.py, _no_session_state), so no statement may make any.
SESSION_COMMAND = re.compile(r"\s*(SET\s+(?!LOCAL\b)|RESET\b|LISTEN\b|DECLARE\b|PREPARE\b)", re.I)
SESSION_FUNCTION = re.compile(
    r"pg_(try_)?advisory_lock(_shared)?\s*\(|set_config\s*\([^)]*,\s*false\s*\)", re.I
)


def _session_state(text: str) -> bool:
    statements = re.sub(r"--[^\n]*", "", text).split(";")
    return any(SESSION_COMMAND.match(s) or SESSION_FUNCTION.search(s) for s in statements)


def test_no_named_statement_leaves_session_state_behind() -> None:
    offenders = [
        f"{path.name}: {name}"
        for path in sorted(QUERIES_DIR.glob("*.sql"))
        for name, text in parse(path.read_text(), path.name).items()
        if _session_state(text)
    ]
    assert not offenders, f"statements that change session state: {offenders}"


def test_the_session_state_check_can_fail() -> None:
    for text in (
        "SET plan_cache_mode = force_generic_plan",
        "SELECT pg_advisory_lock(1)",
        "SELECT set_config('x.y', '1', false)",
        "SELECT 1;\n  LISTEN outbox",
    ):
        assert _session_state(text), text
    for text in ("SET LOCAL plan_cache_mode = force_custom_plan", "SELECT pg_advisory_xact_lock(1)",
                 "UPDATE t\nSET a = 1"):  # fmt: skip
        assert not _session_state(text), text
