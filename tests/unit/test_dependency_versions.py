"""The installed libraries are the ones checked: inside pyproject.toml's ranges, and, for the
libraries whose internals the service reaches into, exactly the versions of the lock files
the test suite ran against. Loud on purpose: a newer faust-streaming, mode or aiokafka can
change a private attribute streams/ relies on without a single import failing."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LOCKS = ("requirements.lock", "requirements-dev.lock")
# Faust's consumer fetch loop and RocksDB store, mode's Service, aiokafka's producer
# (streams/faust_compat), aiokafka's admin client and structs, rocksdict under Faust's store.
INTERNALS = {"faust-streaming", "mode-streaming", "aiokafka", "rocksdict"}


def declared() -> list[Requirement]:
    project = PYPROJECT["project"]
    dev = project["optional-dependencies"]["dev"]
    return [Requirement(r) for r in [*project["dependencies"], *dev]]


def locked(name: str) -> dict[str, Version]:
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==([^\s\\]+)", (ROOT / name).read_text(), flags=re.M)
    return {canonicalize_name(n): Version(v) for n, v in pins}


def outside(requirements: list[Requirement], installed: dict[str, str | None]) -> list[str]:
    """Each requirement whose installed version is missing or outside its range."""
    problems = []
    for req in requirements:
        found = installed.get(canonicalize_name(req.name))
        if found is None:
            problems.append(f"{req.name}: not installed (wanted {req.specifier})")
        elif not req.specifier.contains(found, prereleases=True):
            problems.append(f"{req.name}=={found} is outside {req.specifier}")
    return problems


def installed_versions(names: list[str]) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[canonicalize_name(name)] = version(name)
        except PackageNotFoundError:
            found[canonicalize_name(name)] = None
    return found


def test_outside_names_a_version_past_the_bound_and_a_missing_package() -> None:
    reqs = [Requirement("aiokafka>=0.12,<0.15"), Requirement("faust-streaming>=0.15.2,<0.16")]
    assert outside(reqs, {"aiokafka": "0.14.0", "faust-streaming": "0.15.3"}) == []
    assert outside(reqs, {"aiokafka": "0.15.0", "faust-streaming": "0.15.3"}) == [
        "aiokafka==0.15.0 is outside <0.15,>=0.12"
    ]
    assert outside(reqs, {"aiokafka": "0.14.0"}) == [
        "faust-streaming: not installed (wanted <0.16,>=0.15.2)"
    ]


def test_the_libraries_whose_internals_we_touch_have_upper_bounds() -> None:
    bounded = {
        canonicalize_name(r.name): r.specifier
        for r in declared()
        if canonicalize_name(r.name) in INTERNALS
    }
    assert set(bounded) == INTERNALS
    for name, spec in bounded.items():
        assert any(s.operator in {"<", "<=", "=="} for s in spec), f"{name} has no upper bound"


def test_every_installed_dependency_is_inside_pyproject_ranges() -> None:
    reqs = declared()
    problems = outside(reqs, installed_versions([r.name for r in reqs]))
    assert problems == [], (
        "installed versions outside what was checked (install from requirements-dev.lock): "
        + "; ".join(problems)
    )


def test_the_internals_are_exactly_the_locked_versions() -> None:
    pins = locked("requirements-dev.lock")
    problems = [
        f"{name}=={version(name)} installed, {pins[name]} locked"
        for name in sorted(INTERNALS)
        if Version(version(name)) != pins[name]
    ]
    assert problems == [], "; ".join(problems) + " (make install installs the lock)"


def test_locks_pin_everything_with_hashes_inside_the_ranges_and_agree() -> None:
    runtime, dev = locked(LOCKS[0]), locked(LOCKS[1])
    for name in LOCKS:
        text = (ROOT / name).read_text()
        blocks = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n\n", 1)[-1])
        assert all("--hash=sha256:" in b for b in blocks if "==" in b), name
    # The runtime lock is the dev lock without the dev tools: the same version of each.
    assert {n: v for n, v in dev.items() if n in runtime} == runtime
    project = PYPROJECT["project"]
    for req in (Requirement(r) for r in project["dependencies"]):
        assert runtime[canonicalize_name(req.name)] in req.specifier, req
    for req in declared():
        assert dev[canonicalize_name(req.name)] in req.specifier, req
    assert "setuptools" in runtime  # the build backend, installed with --no-build-isolation
