"""The pinned checkov (a Kubernetes-manifest and Dockerfile policy linter, from PyPI) the chart
and image checks run, in a virtualenv of its own under ``.dev/checkov/<version>/`` (its many
dependencies stay out of the project's lock; idempotent, like devkit.helm).

``python -m devkit.checkov`` installs it and prints its path (.ci/run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHECKOV_VERSION = "3.3.30"
ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".dev" / "checkov" / CHECKOV_VERSION
CHECKOV = VENV / "bin" / "checkov"


class CheckovUnavailable(RuntimeError):
    pass


def ensure_checkov() -> Path:
    """The pinned checkov, installed once: ``pip install checkov==CHECKOV_VERSION``."""
    if CHECKOV.is_file() and os.access(CHECKOV, os.X_OK):
        return CHECKOV
    steps = (
        [sys.executable, "-m", "venv", str(VENV)],
        [str(VENV / "bin" / "pip"), "install", "-q", f"checkov=={CHECKOV_VERSION}"],
    )
    for step in steps:
        out = subprocess.run(step, capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            raise CheckovUnavailable(f"{' '.join(step)} failed:\n{out.stderr[-4000:]}")
    if not CHECKOV.is_file():
        raise CheckovUnavailable(f"pip installed checkov {CHECKOV_VERSION} without {CHECKOV}")
    return CHECKOV


def run_checkov(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """checkov offline (``--skip-download``: no policy metadata fetched from its vendor)."""
    return subprocess.run(
        [str(ensure_checkov()), "--skip-download", "--compact", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )


if __name__ == "__main__":
    try:
        print(ensure_checkov())
    except CheckovUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
