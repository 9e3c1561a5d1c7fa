"""What the operators' files ask of a worker: the metric names used by the Prometheus alert
rules (deploy/prometheus/alerts.yml) and the Grafana dashboards (deploy/grafana/*.json), and
the names a worker's /metrics exposition actually declares."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARDS = ROOT / "deploy" / "grafana"
# Which slice a dashboard belongs to (its metrics are required once the slice is installed).
DASHBOARD_SLICE = {
    "calendar-overview": "calendar",
    "profile-overview": "profile",
    "automation-overview": "automation",
}
SHARED = "shared"

_KEYWORDS = {
    "and", "or", "unless", "bool", "on", "ignoring", "group_left", "group_right", "offset",
    "by", "without", "inf", "nan",
}  # fmt: skip
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, label names,
    label values and durations left out)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values
    s = re.sub(r"\{[^}]*\}", " ", s)  # matchers
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)  # ranges
    names = set()
    for m in _IDENT.finditer(s):
        rest = s[m.end() :].lstrip()
        word = m.group(0)
        if rest.startswith("(") or word.lower() in _KEYWORDS:
            continue
        if m.start() > 0 and (s[m.start() - 1].isdigit() or s[m.start() - 1] == "."):
            continue  # the unit of a number (5m) or a decimal part
        names.add(word)
    return names


@dataclass(frozen=True)
class Use:
    """One expression of an operators' file: where it is, which slice it belongs to."""

    where: str
    slice: str
    expr: str


def rule_uses(path: Path = ALERTS) -> list[Use]:
    """The rules' expressions by group (the file keeps each ``expr`` on one line, which
    this reader checks; promtool checks the rest of the YAML)."""
    uses, group, alert = [], "", ""
    for line in path.read_text().splitlines():
        item = re.match(r"\s*- (name|alert|record): (\S+)", line)
        if item and item.group(1) == "name":
            group = item.group(2)
        elif item:
            alert = item.group(2)
        found = re.match(r"\s*expr: (.*)$", line)
        if found:
            expr = found.group(1).strip()
            assert expr and expr[0] not in "|>'\"", f"{path.name}: {alert}: keep expr on one line"
            uses.append(Use(f"{path.name}: {alert}", group, expr))
    return uses


def dashboard_uses(folder: Path = DASHBOARDS) -> list[Use]:
    uses = []
    for path in sorted(folder.glob("*.json")):
        board = json.loads(path.read_text())
        owner = DASHBOARD_SLICE.get(path.stem, SHARED)
        for panel in _panels(board.get("panels", [])):
            for target in panel.get("targets", []):
                uses.append(Use(f"{path.name}: {panel['title']}", owner, target["expr"]))
    return uses


def _panels(panels: Iterable[dict[str, object]]) -> Iterable[dict[str, object]]:
    for panel in panels:
        yield panel
        nested = panel.get("panels")
        if isinstance(nested, list):
            yield from _panels(nested)


def exported_names(exposition: str) -> set[str]:
    """Every series name a /metrics text declares, with the suffixes its type implies (a
    labelled family with no child yet still counts: it is declared and typed)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names.update(f"{family.name}{s}" for s in ("_bucket", "_count", "_sum"))
    return names
