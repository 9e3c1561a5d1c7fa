"""The pinned helm the chart checks use, built from the Go module proxy into
``.dev/helm/<version>/helm`` (cached like the Kafka jars; idempotent).

``python -m devkit.helm`` installs it and prints its path (``make helm``, .ci/run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HELM_VERSION = "v3.21.4"
ROOT = Path(__file__).resolve().parent.parent
HELM = ROOT / ".dev" / "helm" / HELM_VERSION / "helm"
# Where Go lives when it is not on PATH (the machine's own install).
GO_FALLBACKS = (Path("/usr/local/go/bin/go"), Path("/usr/lib/go/bin/go"))


class HelmUnavailable(RuntimeError):
    pass


def go_binary() -> str:
    found = shutil.which("go")
    if found:
        return found
    for candidate in GO_FALLBACKS:
        if candidate.is_file():
            return str(candidate)
    raise HelmUnavailable("go is not installed: helm is built with `go install` (.ci/run)")


def ensure_helm() -> Path:
    """The pinned helm, built once: ``go install helm.sh/helm/v3/cmd/helm@HELM_VERSION``."""
    if HELM.is_file() and os.access(HELM, os.X_OK):
        return HELM
    HELM.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(HELM.parent), "CGO_ENABLED": "0"}
    out = subprocess.run(
        [go_binary(), "install", f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0 or not HELM.is_file():
        raise HelmUnavailable(f"go install helm {HELM_VERSION} failed:\n{out.stderr[-4000:]}")
    return HELM


if __name__ == "__main__":
    try:
        print(ensure_helm())
    except HelmUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
