"""The bench's one result model and its pure formatting: every bench returns ``Measure`` rows,
``python -m bench`` prints them as one table and writes them as JSON.

Ratios are always project / reference (both in the measure's unit), so a ratio shares its
measure's direction: for a rate higher is better, for seconds or milliseconds lower is better.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

Op = Literal[">=", "<=", "<", ">"]
REPORT = "report"  # the target text of an informational measure (no pass/fail)


@dataclass(frozen=True)
class Target:
    """One bound on a measure: on its project figure (absolute) or on its ratio."""

    op: Op
    bound: float
    on: Literal["project", "ratio"] = "project"

    def holds(self, project: float, ratio: float | None) -> bool | None:
        value = ratio if self.on == "ratio" else project
        if value is None or math.isnan(value):
            return None
        if self.op == ">=":
            return value >= self.bound
        if self.op == "<=":
            return value <= self.bound
        if self.op == "<":
            return value < self.bound
        return value > self.bound

    def text(self, unit: str) -> str:
        op = {">=": "≥", "<=": "≤", "<": "<", ">": ">"}[self.op]
        if self.on == "ratio":
            return f"{op} {bound(self.bound)}x"
        return f"{op} {bound(self.bound)} {unit}".rstrip()


@dataclass(frozen=True)
class Measure:
    """One row of the summary table (and of ``bench/results/latest.json``)."""

    name: str
    """Stable across runs and sizes: ``--compare`` matches measures by name."""
    unit: str
    project: float
    reference: float | None
    ratio: float | None
    target: str
    passed: bool | None
    """None: informational (no target), or the target could not be judged."""
    higher_is_better: bool
    bench: str = ""
    detail: str = ""
    """Sizes and what the reference is, e.g. '50,000 events; reference: bare pipeline'."""

    def to_json(self) -> dict[str, Any]:
        return {k: _finite(v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Measure:
        def num(key: str) -> float | None:
            value = data.get(key)
            return None if value is None else float(value)

        project = num("project")
        return cls(
            name=str(data["name"]),
            unit=str(data.get("unit", "")),
            project=math.nan if project is None else project,
            reference=num("reference"),
            ratio=num("ratio"),
            target=str(data.get("target", REPORT)),
            passed=data.get("passed"),
            higher_is_better=bool(data.get("higher_is_better", True)),
            bench=str(data.get("bench", "")),
            detail=str(data.get("detail", "")),
        )


def measure(
    name: str,
    unit: str,
    project: float,
    reference: float | None = None,
    *,
    targets: Sequence[Target] = (),
    higher_is_better: bool = True,
    bench: str = "",
    detail: str = "",
) -> Measure:
    """A measure with its ratio (project / reference) and verdict worked out from ``targets``
    (all must hold; no targets: informational)."""
    ratio = None
    if reference is not None and reference != 0 and not math.isnan(reference):
        ratio = project / reference
    verdicts = [t.holds(project, ratio) for t in targets]
    unjudged = not targets or any(v is None for v in verdicts)
    passed = None if unjudged else all(verdicts)
    text = " and ".join(t.text(unit) for t in targets) if targets else REPORT
    return Measure(
        name, unit, project, reference, ratio, text, passed, higher_is_better, bench, detail
    )


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def number(value: float | None) -> str:
    """A figure with as many digits as it deserves: 12,345 / 123 / 12.3 / 1.23 / 0.123."""
    if value is None or math.isnan(value):
        return "—"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size == 0:
        return "0"
    if size >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def bound(value: float) -> str:
    """A target's bound as written: 5,000 / 0.5 / 2."""
    return f"{int(value):,}" if value == int(value) else f"{value:g}"


def with_unit(value: float | None, unit: str) -> str:
    text = number(value)
    return text if text == "—" or not unit else f"{text} {unit}"


def verdict(m: Measure) -> str:
    if m.passed is None:
        return "—" if m.target == REPORT else "n/a"
    return "pass" if m.passed else "FAIL"


HEADER = ("measure", "project", "reference", "ratio", "target", "result")


def rows(measures: Iterable[Measure]) -> list[tuple[str, ...]]:
    return [
        (
            m.name,
            with_unit(m.project, m.unit),
            with_unit(m.reference, m.unit),
            "—" if m.ratio is None else f"{m.ratio:.2f}x",
            m.target,
            verdict(m),
        )
        for m in measures
    ]


def table(measures: Sequence[Measure]) -> str:
    """The summary table: numbers right-aligned, text left-aligned, one line per measure."""
    body = rows(measures)
    widths = [max(len(r[i]) for r in [HEADER, *body]) for i in range(len(HEADER))]
    right = {1, 2, 3}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    lines = [line(HEADER), rule, *(line(r) for r in body)]
    failed = sum(1 for m in measures if m.passed is False)
    passed = sum(1 for m in measures if m.passed is True)
    lines.append(rule)
    lines.append(
        f"{passed} passed, {failed} failed, {len(measures) - passed - failed} informational; "
        "ratio = project / reference, both measured in this run"
    )
    return "\n".join(lines)


@dataclass(frozen=True)
class PgMode:
    """How the PostgreSQL the bench ran on commits, as the server reports it (``SHOW fsync``,
    ``SHOW synchronous_commit``): ``durable`` is production's (both on), ``fast`` the dev
    stack's (both off); anything else is ``mixed`` and says so."""

    fsync: str
    synchronous_commit: str

    @property
    def name(self) -> str:
        if self.fsync == "on" and self.synchronous_commit not in {"off", ""}:
            return "durable"
        if self.fsync == "off" and self.synchronous_commit == "off":
            return "fast"
        return "mixed"

    def text(self) -> str:
        return (
            f"PostgreSQL {self.name}: fsync={self.fsync or '?'}, "
            f"synchronous_commit={self.synchronous_commit or '?'}"
        )

    def to_json(self) -> dict[str, str]:
        return {
            "mode": self.name,
            "fsync": self.fsync,
            "synchronous_commit": self.synchronous_commit,
        }


BENCH_PG_MODES = ("durable", "fast")


def mode_mismatch(wanted: str | None, mode: PgMode) -> str | None:
    """Why a run asked for with ``BENCH_PG=wanted`` must not go on, or None. Unset: any mode
    (the heading says which)."""
    if not wanted:
        return None
    if wanted not in BENCH_PG_MODES:
        return f"BENCH_PG must be one of {', '.join(BENCH_PG_MODES)}, not {wanted!r}"
    if mode.name != wanted:
        return (
            f"BENCH_PG={wanted} but the server runs {mode.text()} "
            f"(`make bench` restarts the stack with STACK_PG_DURABLE={int(wanted == 'durable')})"
        )
    return None


def heading(machine: Mapping[str, Any]) -> str:
    """The summary's first line: when, how long, which commit, which PostgreSQL mode, and the
    waits for a quiet database before the benches (bench/quiet.py), when the run recorded
    them."""
    pg = machine.get("postgres") or {}
    mode = PgMode(str(pg.get("fsync", "")), str(pg.get("synchronous_commit", "")))
    waits = machine.get("quiet_waits")
    quiet = "" if waits is None else f", {quiet_summary(waits)}"
    return (
        f"== summary ({machine.get('date', '?')}, {float(machine.get('seconds', 0)):.0f} s, "
        f"commit {machine.get('git_commit') or 'unknown'}, {mode.text()}{quiet}) =="
    )


def document(measures: Sequence[Measure], machine: Mapping[str, Any]) -> dict[str, Any]:
    """What ``bench/results/latest.json`` holds."""
    return {"machine": dict(machine), "measures": [m.to_json() for m in measures]}


def measures_of(doc: Mapping[str, Any]) -> list[Measure]:
    return [Measure.from_json(m) for m in doc.get("measures", [])]


def quiet_summary(waits: Sequence[Mapping[str, Any]]) -> str:
    """One phrase for the summary heading: how many waits for a quiet database (bench/quiet.py),
    how long, the longest, and any whose deadline passed."""
    if not waits:
        return "no quiet-database wait"
    total = sum(float(w["checkpoint_s"]) + float(w["vacuum_s"]) for w in waits)
    longest = max(waits, key=lambda w: float(w["checkpoint_s"]) + float(w["vacuum_s"]))
    late = [str(w["before"]) for w in waits if w.get("timed_out")]
    text = (
        f"quiet database before each bench ({len(waits)} waits, {total:.1f} s in all, "
        f"longest {float(longest['checkpoint_s']) + float(longest['vacuum_s']):.1f} s "
        f"before {longest['before']}"
    )
    if late:
        text += f"; deadline passed before {', '.join(late)}"
    return text + ")"
