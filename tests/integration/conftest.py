"""Integration fixtures: a private Kafka broker for tests that freeze or stop it."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.stacks.private_stack import PrivateStack


@pytest.fixture
def private_kafka(tmp_path: Path) -> Iterator[PrivateStack]:
    """A broker of this test only, so that it can be frozen (its PostgreSQL is unused)."""
    stack = PrivateStack(tmp_path).up()
    try:
        yield stack
    finally:
        pid = stack.kafka_pid()
        if pid is not None:  # never leave it stopped: `down` could not end it
            os.kill(pid, signal.SIGCONT)
        stack.down()
