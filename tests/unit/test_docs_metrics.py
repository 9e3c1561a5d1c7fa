"""Every metric README, docs/architecture.md or a runbook names is one streams/ creates.

The e2e check (tests/e2e/test_operators_view.py) covers the alert rules and dashboards
against a running worker; this one reads the prose. A name counts as a metric when it
starts like one of the service's metric families and ends like a series (``_total``,
``_seconds``, ``_bucket``, ...) or carries labels (``name{label}``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    ROOT / "docs" / "architecture.md",
    *(ROOT / "docs" / "runbooks").glob("*.md"),
]
KINDS = {"Counter", "Gauge", "Histogram", "Summary"}


def created() -> dict[str, str]:
    """Metric name -> kind, from every ``Counter("name", ...)``-style call under streams/."""
    found: dict[str, str] = {}
    for path in (ROOT / "streams").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            kind = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            first = node.args[0]
            if kind in KINDS and isinstance(first, ast.Constant) and isinstance(first.value, str):
                found[first.value] = kind
    return found


def exported(metrics: dict[str, str]) -> set[str]:
    """The series names Prometheus sees (a counter's ``_total``, a histogram's buckets)."""
    out: set[str] = set()
    for name, kind in metrics.items():
        if kind == "Counter":
            base = name.removesuffix("_total")
            out |= {base + "_total", base + "_created"}
        elif kind in {"Histogram", "Summary"}:
            out |= {name, *(name + s for s in ("_bucket", "_sum", "_count", "_created"))}
        else:
            out.add(name)
    return out


def named_in_docs(prefixes: tuple[str, ...]) -> set[tuple[str, str]]:
    series = re.compile(r"`(?:[a-z_]+\()?([a-z][a-z0-9_]*?)(\{|_total\b|_seconds\b|_bucket\b)")
    found = set()
    for path in DOCS:
        for m in series.finditer(path.read_text()):
            name = m.group(1) + ("" if m.group(2) == "{" else m.group(2))
            if name.startswith(prefixes):
                found.add((path.relative_to(ROOT).as_posix(), name))
    return found


def test_the_metric_reader_finds_the_services_families() -> None:
    metrics = created()
    assert {
        "reminders_outbox_backlog",
        "reminders_retention_more",
        "reminders_outbox_publish_in_doubt_total",
    } <= set(metrics)
    assert "reminders_timer_run_duration_seconds_bucket" in exported(metrics)


def test_every_metric_the_docs_name_exists() -> None:
    metrics = created()
    prefixes = tuple(sorted({n.split("_")[0] + "_" for n in metrics}))
    known = exported(metrics)
    missing = sorted((doc, name) for doc, name in named_in_docs(prefixes) if name not in known)
    assert missing == []
