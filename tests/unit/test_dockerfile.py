"""The worker image's Dockerfile (no Docker engine here to build it): an exact CPython patch of
the minor CI tests on, the lock installed with hashes in a build stage, no installer left in
the runtime stage, and checkov's Dockerfile policies (devkit.checkov) without a finding."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
CI = ROOT / ".ci" / "run"

pytestmark = pytest.mark.timeout(900)  # the first checkov install takes a minute or two


def stages() -> list[list[str]]:
    """The instructions of each stage (continuation lines joined, comments left out)."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    out: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            out.append([])
        out[-1].append(line)
    return out


def test_both_stages_start_from_one_exact_python_patch_on_bookworm() -> None:
    bases = [s[0].split()[1] for s in stages()]
    assert len(bases) == 2 and bases[0] == bases[1], bases
    assert re.fullmatch(r"python:3\.13\.\d+-slim-bookworm", bases[0]), bases[0]
    # CI's main interpreter is the same minor (.ci/run picks pyenv's newest 3.13).
    assert "/root/.pyenv/versions/3.13." in CI.read_text()


def test_the_lock_is_installed_with_hashes_in_the_build_stage_only() -> None:
    build, runtime = stages()
    installs = [i for i in build if " install " in i]
    assert any("--require-hashes -r requirements.lock" in i for i in installs), installs
    assert any("--no-deps --no-build-isolation ." in i for i in installs), installs
    assert not [i for i in runtime if "pip install" in i or "pip3 install" in i]
    assert "RUN python -m pip uninstall -y -q pip" in " ".join(runtime)
    assert "COPY --from=build /opt/venv /opt/venv" in runtime
    assert "USER reminders" in runtime and runtime[-1] == 'CMD ["streams", "worker"]'


def test_the_dockerfile_policies_find_nothing() -> None:
    from devkit.checkov import CheckovUnavailable, run_checkov

    try:
        out = run_checkov("-f", str(DOCKERFILE), "--framework", "dockerfile", "-o", "json")
    except CheckovUnavailable as exc:
        pytest.fail(str(exc))
    report = json.loads(out.stdout)
    failed = [f"{c['check_id']}: {c['check_name']}" for c in report["results"]["failed_checks"]]
    assert failed == [] and report["summary"]["passed"] > 20, out.stderr[-2000:]
