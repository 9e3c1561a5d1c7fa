"""Metric names as they are exposed: a counter is named with ``_total`` where it is created,
and every family carries the service's prefix unless a seed fixes its name (the calendar,
profile and automation slices' own series)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "reminders_"
SEED_FIXED = ("calendar_reminder_dispatch_", "profile_document_expiry_", "automation_scheduler_")


def created() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in (ROOT / "streams").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            kind = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            first = node.args[0]
            if kind in {"Counter", "Gauge", "Histogram", "Summary"} and isinstance(
                first, ast.Constant
            ):
                found[str(first.value)] = str(kind)
    return found


def test_every_counter_is_named_with_total_where_it_is_created() -> None:
    names = created()
    assert len(names) > 50
    assert [n for n, kind in names.items() if kind == "Counter" and not n.endswith("_total")] == []
