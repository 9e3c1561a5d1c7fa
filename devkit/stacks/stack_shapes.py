"""Private stacks of a production shape (stack/stack.sh's STACK_* settings), the client
settings each shape prints (``stack.sh env``), and the service's CLI run against them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

from devkit.stacks.private_stack import PrivateStack
from devkit.workers import ROOT, free_port, worker_env


@contextlib.contextmanager
def shaped_stack(**shape: str) -> Iterator[tuple[PrivateStack, dict[str, str]]]:
    """A private stack started with ``shape`` (e.g. STACK_KAFKA_SECURITY="sasl_ssl"), and the
    client settings of that shape. ``STACK_KAFKA_BROKERS="3"`` gets free ports for each node."""
    stack = PrivateStack()
    if shape.get("STACK_KAFKA_BROKERS") == "3":
        ports = [stack.kafka_port, free_port(), free_port()]
        controllers = [stack.controller_port, free_port(), free_port()]
        shape = {
            "KAFKA_PORTS": ",".join(map(str, ports)),
            "KAFKA_CONTROLLER_PORTS": ",".join(map(str, controllers)),
            "KAFKA_HEAP": "-Xms128m -Xmx384m",
            **shape,
        }
    stack.env.update(shape)
    try:
        stack.up()
        out = stack._stack("env")
        assert out.returncode == 0, out.stderr
        client = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
        yield stack, client
    finally:
        stack.down()


def service_env(client: dict[str, str], prefix: str, **extra: str) -> dict[str, str]:
    """A worker's (or the CLI's) environment on a shaped stack: its KAFKA_* client settings."""
    return {
        **os.environ,
        **worker_env(client["DATABASE_URL"], client["KAFKA_BOOTSTRAP"], prefix),
        **{k: v for k, v in client.items() if k.startswith("KAFKA_")},
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def streams_cli(
    env: dict[str, str], *args: str, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """``python -m streams ARGS`` as a user runs it, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "streams", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
