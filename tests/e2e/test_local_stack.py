"""The no-Docker stack script: start twice is fine, stop leaves no process behind."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from devkit.workers import ROOT, free_port

pytestmark = pytest.mark.e2e


def processes_under(path: Path) -> list[str]:
    out = subprocess.run(
        ["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True, check=True
    )
    return [line for line in out.stdout.splitlines() if str(path) in line and "ps -ww" not in line]


@pytest.mark.timeout(1500)  # six stack.sh calls of up to 240 s each
def test_stack_up_twice_then_down_leaves_nothing_running(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    env = {
        **os.environ,
        "DEV_DIR": str(dev),
        "KAFKA_PORT": str(free_port()),
        "KAFKA_CONTROLLER_PORT": str(free_port()),
        "PG_PORT": str(free_port()),
    }
    script = str(ROOT / "stack" / "stack.sh")

    def stack(cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([script, cmd], env=env, capture_output=True, text=True, timeout=240)

    try:
        first = stack("up")
        assert first.returncode == 0, first.stderr
        second = stack("up")
        assert second.returncode == 0, second.stderr
        assert "already running" in second.stderr
        status = stack("status")
        assert "kafka: running" in status.stdout and "postgres: running" in status.stdout
        assert processes_under(dev), "nothing is running under the stack's folder"
    finally:
        down = stack("down")
    assert down.returncode == 0, down.stderr
    assert processes_under(dev) == []
    assert "kafka: stopped" in stack("status").stdout
    again = stack("down")
    assert again.returncode == 0, again.stderr
