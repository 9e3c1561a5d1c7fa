"""The pinned Jaeger (v2, one binary: OTLP receiver, in-memory storage, query API) the tracing
e2e test sends spans to, built from the Go module proxy into ``.dev/jaeger/<version>/jaeger``
(cached like the Kafka jars; idempotent).

``python -m devkit.jaeger`` builds it and prints its path (.ci/run). ``go install pkg@version``
refuses Jaeger (its go.mod has replace directives), so the build goes through a scratch
module that requires it as a tool: ``go get -tool …@VERSION`` then ``go build``."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from devkit.helm import HelmUnavailable, go_binary

JAEGER_VERSION = "v1.75.0"
PACKAGE = "github.com/jaegertracing/jaeger/cmd/jaeger"
ROOT = Path(__file__).resolve().parent.parent
JAEGER = ROOT / ".dev" / "jaeger" / JAEGER_VERSION / "jaeger"


class JaegerUnavailable(RuntimeError):
    pass


def _go() -> str:
    try:
        return go_binary()
    except HelmUnavailable as exc:
        raise JaegerUnavailable("go is not installed: jaeger is built with go (.ci/run)") from exc


def ensure_jaeger() -> Path:
    """The pinned jaeger, built once (a few minutes the first time, with an empty module cache)."""
    if JAEGER.is_file() and os.access(JAEGER, os.X_OK):
        return JAEGER
    JAEGER.parent.mkdir(parents=True, exist_ok=True)
    go = _go()
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    with tempfile.TemporaryDirectory(prefix="jaegerbuild-") as scratch:
        partial = JAEGER.with_suffix(".partial")
        for argv in (
            [go, "mod", "init", "jaegerbuild"],
            [go, "get", "-tool", f"{PACKAGE}@{JAEGER_VERSION}"],
            [go, "build", "-o", str(partial), PACKAGE],
        ):
            out = subprocess.run(
                argv, cwd=scratch, env=env, capture_output=True, text=True, timeout=2400
            )
            if out.returncode != 0:
                raise JaegerUnavailable(
                    f"{' '.join(argv[1:3])} for jaeger {JAEGER_VERSION} failed:\n"
                    f"{out.stderr[-4000:]}"
                )
        partial.replace(JAEGER)  # whole or absent: a killed build leaves no half binary
    return JAEGER


if __name__ == "__main__":
    try:
        print(ensure_jaeger())
    except JaegerUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
