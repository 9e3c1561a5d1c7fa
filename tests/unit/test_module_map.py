"""docs/modules.md is the current module map, and every module says what it holds."""

from __future__ import annotations

from devkit.module_map import ROOT, module_map


def test_the_module_map_is_current() -> None:
    current = (ROOT / "docs" / "modules.md").read_text()
    assert current == module_map(), "run: python -m devkit.module_map > docs/modules.md"


def test_every_module_has_a_docstring() -> None:
    blank = [
        line for line in module_map().splitlines() if line.startswith("- ") and line.endswith("`")
    ]
    assert blank == []
