"""The database boundary has one shape: named statements in db/queries/<context>.sql, one
repository function per statement named after it, and no SQL or driver in streams/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from db.queries import QUERIES_DIR, parse

ROOT = Path(__file__).resolve().parents[2]
# Repositories whose functions mirror their statements: <context>_<function>; a context's
# statements may be split over several repository modules.
MIRRORED = {
    "calendar": ["calendar"],
    "outbox": ["outbox"],
    "automation": ["automation", "automation_inputs", "automation_planning", "automation_delivery"],
    "workers": ["workers"],
    "profile": ["profile"],
}
SQL_TEXT = re.compile(r"\b(SELECT\s|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)", re.I)
# The startup probe tells a refused login from an absent server by asyncpg's error types.
DRIVER_ALLOWED = {"streams/wait.py"}


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


@pytest.mark.parametrize("context", sorted(MIRRORED))
def test_each_statement_has_one_function_named_after_it(context: str) -> None:
    statements: set[str] = set()
    for path in QUERIES_DIR.glob(f"{context}*.sql"):  # a context's statements, in one or more files
        statements |= set(parse(path.read_text(), path.name))
    used: set[str] = set()
    functions = [
        fn
        for module in MIRRORED[context]
        for fn in ast.parse((ROOT / "db" / f"{module}.py").read_text()).body
    ]
    for fn in functions:
        if isinstance(fn, ast.AsyncFunctionDef | ast.FunctionDef):
            calls = _sql_calls(fn)
            if not calls:
                continue
            assert len(calls) == 1, f"{context}: {fn.name} runs {calls}: one statement each"
            assert calls[0] == f"{context}_{fn.name}", (
                f"{context}: {fn.name} runs {calls[0]}; name it after its statement"
            )
            used.add(calls[0])
    assert statements == used, f"statements without a function: {sorted(statements - used)}"


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
