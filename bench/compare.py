"""``--compare``: each measure against the same measure (by name) in an earlier JSON.

The figure judged is the ratio when both runs have one (project / reference measured in the
same run: what SPEC §5 counts, and steadier when the machine is busier one day than the
other), else the project figure. A measure got worse when that figure moved against its
direction (``higher_is_better``) by more than ``threshold`` (25%).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bench.report import Measure, number

THRESHOLD = 0.25
Basis = Literal["ratio", "project", "new", "gone"]


@dataclass(frozen=True)
class Change:
    name: str
    basis: Basis
    before: float | None
    after: float | None
    gain: float | None
    """Relative change in the good direction: +0.10 = 10% better, -0.30 = 30% worse."""
    worse: bool
    """Got worse by more than the threshold."""
    unit: str = ""


def _usable(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def gain(before: float, after: float, higher_is_better: bool) -> float | None:
    """Relative change of ``after`` against ``before``, positive when it got better."""
    if before == 0:
        return None
    rel = (after - before) / abs(before)
    return rel if higher_is_better else -rel


def change(before: Measure | None, after: Measure | None, threshold: float = THRESHOLD) -> Change:
    if after is None:
        assert before is not None
        return Change(before.name, "gone", before.project, None, None, False, before.unit)
    if before is None:
        return Change(after.name, "new", None, after.project, None, False, after.unit)
    if _usable(before.ratio) and _usable(after.ratio):
        basis: Basis = "ratio"
        old, new = before.ratio, after.ratio
    else:
        basis = "project"
        old, new = before.project, after.project
    assert old is not None and new is not None
    if not (_usable(old) and _usable(new)):
        return Change(after.name, basis, old, new, None, False, after.unit)
    g = gain(old, new, after.higher_is_better)
    return Change(after.name, basis, old, new, g, g is not None and g < -threshold, after.unit)


def compare(
    before: Sequence[Measure], after: Sequence[Measure], threshold: float = THRESHOLD
) -> list[Change]:
    """One change per measure name, in ``after``'s order, then the ones only ``before`` has."""
    old = {m.name: m for m in before}
    new_names = {m.name for m in after}
    out = [change(old.get(m.name), m, threshold) for m in after]
    out += [change(m, None, threshold) for m in before if m.name not in new_names]
    return out


def regressions(changes: Sequence[Change]) -> list[Change]:
    return [c for c in changes if c.worse]


def _figure(c: Change, value: float | None) -> str:
    if c.basis == "ratio":
        return f"{number(value)}x"
    text = number(value)
    return f"{text} {c.unit}" if c.unit and text != "—" else text


def describe(c: Change) -> str:
    if c.basis == "new":
        return "new (not in the earlier file)"
    if c.basis == "gone":
        return "not measured in this run"
    if c.gain is None:
        return "no comparable figure"
    word = "better" if c.gain > 0 else "worse" if c.gain < 0 else "same"
    flag = "   <-- more than 25% worse" if c.worse else ""
    return f"{abs(c.gain) * 100:.1f}% {word}{flag}"


def format_changes(changes: Sequence[Change], threshold: float = THRESHOLD) -> str:
    head = ("measure", "compared", "before", "after", "change")
    body = [
        (c.name, c.basis, _figure(c, c.before), _figure(c, c.after), describe(c)) for c in changes
    ]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(4)]

    def line(cells: Sequence[str]) -> str:
        first = [
            cells[0].ljust(widths[0]),
            cells[1].ljust(widths[1]),
            cells[2].rjust(widths[2]),
            cells[3].rjust(widths[3]),
        ]
        return "  ".join([*first, cells[4]]).rstrip()

    bad = regressions(changes)
    verdict = (
        f"{len(bad)} measure(s) more than {threshold:.0%} worse: " + ", ".join(c.name for c in bad)
        if bad
        else f"no measure more than {threshold:.0%} worse"
    )
    return "\n".join([line(head), *(line(r) for r in body), verdict])
