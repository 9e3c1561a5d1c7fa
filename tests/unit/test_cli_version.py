"""The console command: ``streams`` (``reminders`` an alias) and a ``--version`` that works even
where the settings would not load (a fresh image, a typo in the environment)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from streams.cli import main, version

ROOT = Path(__file__).resolve().parents[2]


def test_streams_is_the_console_command_and_reminders_its_alias() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"streams": "streams.cli:main", "reminders": "streams.cli:main"}


def test_version_prints_without_loading_settings() -> None:
    env = {**os.environ, "WEB_PORT": "not-a-port", "DATABASE_URL": "nonsense"}
    out = subprocess.run(
        [sys.executable, "-m", "streams", "--version"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"streams {version()}"
    assert out.stderr == ""


def test_version_is_the_distributions() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version() in {declared, "0+unknown"}
    assert main(["--version"]) == 0
