"""README's configuration table stays true to the settings classes (streams/settings.py and
each slice's streams/slices/<name>/settings.py): every setting has a row,
every row names settings that exist, and each row's defaults and ranges are the code's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from annotated_types import Ge, Gt, Le
from pydantic import SecretStr

from streams.settings import PROJECT_ROOT, all_fields

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
FIELDS = all_fields()
# Rows that document the local stack or families of variables, not Settings fields.
NOT_SETTINGS = ("local stack", "`TIMER_<NAME>_")
# A default that depends on other settings, described instead of quoted.
DESCRIBED = {"WEB_ADVERTISED_URL": "http://WEB_HOST:WEB_PORT"}


def rows() -> list[tuple[list[str], str, str]]:
    """(variable names, default cell, range cell) for each row of the settings table."""
    lines = README.split("\n")
    start = lines.index("| variable | default | range | meaning |")
    out = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if cells[0].startswith(NOT_SETTINGS):
            continue
        out.append((re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0]), cells[1], cells[2]))
    return out


def number(v: float) -> str:
    return str(v) if isinstance(v, int) else f"{v:g}"


def code_range(name: str) -> str | None:
    """The field's bounds as the table writes them: 1..32, > 0, ≤ 600, ≥ 1."""
    low: Any = None
    high: Any = None
    open_low = False
    for m in FIELDS[name.lower()].metadata:
        if isinstance(m, Ge):
            low = m.ge
        elif isinstance(m, Gt):
            low, open_low = m.gt, True
        elif isinstance(m, Le):
            high = m.le
    if low is None and high is None:
        return None
    if open_low:
        return f"> {number(low)}" + (f", ≤ {number(high)}" if high is not None else "")
    return f"≥ {number(low)}" if high is None else f"{number(low)}..{number(high)}"


def code_default(name: str) -> str:
    value = FIELDS[name.lower()].default
    if name in DESCRIBED:
        return DESCRIBED[name]
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Path):
        return str(value.relative_to(PROJECT_ROOT))
    return str(value)


def same_default(cell: str, code: str) -> bool:
    text = cell.strip("`").removesuffix(" (off)")
    text = "" if text == "empty" else text
    try:
        return float(text) == float(code)
    except ValueError:
        return text == code


def test_every_setting_has_a_row_and_every_row_names_settings() -> None:
    named = [n for names, _, _ in rows() for n in names]
    assert sorted(set(named)) == sorted(named), "a setting has two rows"
    assert {n.lower() for n in named} - set(FIELDS) == set(), "rows of settings that do not exist"
    assert set(FIELDS) - {n.lower() for n in named} == set(), "settings without a row"


def test_defaults_in_the_table_are_the_codes() -> None:
    for names, cell, _ in rows():
        parts = cell.split(", ")  # list defaults have no space: `300,900,3600`
        parts = parts * len(names) if len(parts) == 1 else parts
        assert len(parts) == len(names), (names, cell)
        for name, part in zip(names, parts, strict=True):
            assert same_default(part, code_default(name)), (
                f"{name}: README {part}, code {code_default(name)!r}"
            )


def test_ranges_in_the_table_are_the_codes() -> None:
    for names, _, cell in rows():
        ranges = [code_range(n) for n in names]
        one = len(set(ranges)) == 1
        expected = (ranges[0] or "") if one else "; ".join(r or "—" for r in ranges)
        assert cell == expected, f"{names}: README {cell!r}, code {expected!r}"


def test_the_table_parses_a_wrong_default_as_wrong() -> None:
    assert not same_default("3000", "1800")
    assert same_default("1.0", "1.0") and same_default("empty", "") and same_default("`a`", "a")
