"""Command-line tools some tests need (promtool, docker-compose, ...): missing in CI is a
failure, elsewhere a skip saying which package to install."""

from __future__ import annotations

import os
import shutil

import pytest


def tool(name: str) -> str:
    """A required command-line tool: missing in CI is a failure (.ci/run installs it)."""
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed (.ci/run installs it with apt)")
        pytest.skip(f"{name} is not installed (apt-get install the Debian package)")
    return found
