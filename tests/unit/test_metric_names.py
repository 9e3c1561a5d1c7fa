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


def test_every_family_carries_the_service_prefix_unless_a_seed_fixes_its_name() -> None:
    names = created()
    assert [n for n in names if not n.startswith((PREFIX, *SEED_FIXED))] == []
    for seed in (  # names the seeds (000, 001) give, exactly
        "calendar_reminder_dispatch_cycle_duration_seconds",
        "calendar_reminder_dispatch_items_total",
        "calendar_reminder_dispatch_backlog",
        "calendar_reminder_dispatch_lateness_seconds",
        "calendar_reminder_dispatch_skip_locked_total",
        "calendar_reminder_dispatch_errors_total",
        "profile_document_expiry_reminders_total",
        "profile_document_expiry_reminder_cycle_duration_seconds",
        "profile_document_expiry_reminder_backlog",
        "profile_document_expiry_reminder_errors_total",
    ):
        assert seed in names, seed
