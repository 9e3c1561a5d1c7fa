"""One log format everywhere: with LOG_FORMAT=json every line on stderr of each entry point
(a CLI command, the standalone relay, the timer process) is a JSON object with an action, and
LOG_LEVEL=debug leaves the libraries at info (the worker's own: tests/e2e/test_worker_json_logs.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from streams.settings import PROJECT_ROOT

LIBRARIES = ("aiokafka", "kafka", "asyncpg", "faust", "mode", "aiohttp")


def environment(database_url: str, kafka_bootstrap: str, prefix: str, data: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "KAFKA_BOOTSTRAP": kafka_bootstrap,
        "TOPIC_PREFIX": prefix,
        "WORKER_DATA_DIR": str(data),
        "LOG_FORMAT": "json",
        "LOG_LEVEL": "debug",
    }


def parsed(stderr: bytes) -> list[dict[str, object]]:
    """Every line as JSON (a line that is not fails the test, naming it)."""
    out = []
    for line in stderr.decode(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}")
        assert isinstance(record, dict) and isinstance(record.get("action"), str), line
        assert {"ts", "level", "logger"} <= record.keys(), line
        out.append(record)
    assert out, "no log line at all"
    # LOG_LEVEL=debug is the service's debug, not the libraries'.
    noisy = [r for r in out if r["level"] == "debug" and str(r["logger"]).startswith(LIBRARIES)]
    assert not noisy, noisy[:3]
    return out


async def spawn(env: dict[str, str], *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        cwd=PROJECT_ROOT,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def lines_until(stream: asyncio.StreamReader, action: str, timeout: float) -> bytes:
    """What the stream said up to and including the first line with ``action``."""
    seen = b""

    async def read() -> bytes:
        nonlocal seen
        while line := await stream.readline():
            seen += line
            if json.loads(line).get("action") == action:
                return seen
        pytest.fail(f"the stream ended before {action}: {seen[-2000:]!r}")

    return await asyncio.wait_for(read(), timeout)


@pytest.mark.timeout(120)
async def test_a_cli_command_writes_json_lines(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    env = environment(database_url, kafka_bootstrap, topic_prefix, tmp_path)
    proc = await spawn(env, "-m", "streams", "timers", "run", "outbox-retention")
    _, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    actions = [r["action"] for r in parsed(err)]
    assert "outbox_retention" in actions, actions
    [line] = [r for r in parsed(err) if r["action"] == "outbox_retention"]
    assert isinstance(line["deleted"], int) and line["schedule"] == "outbox-retention"


@pytest.mark.timeout(120)
async def test_the_standalone_relay_writes_json_lines(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    env = environment(database_url, kafka_bootstrap, topic_prefix, tmp_path)
    proc = await spawn(env, "-m", "streams.outbox")
    try:
        assert proc.stderr is not None
        head = await lines_until(proc.stderr, "outbox_relay_start", 60)
        proc.send_signal(signal.SIGTERM)
        _, rest = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    records = parsed(head + rest)
    [start] = [r for r in records if r["action"] == "outbox_relay_start"]
    assert isinstance(start["batch_size"], int), start
    assert "outbox_relay_stop" in [r["action"] for r in records]


@pytest.mark.timeout(120)
async def test_the_timer_process_writes_json_lines(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    """The child a worker starts: ready on stdout, then stopped when its stdin ends."""
    env = environment(database_url, kafka_bootstrap, topic_prefix, tmp_path)
    proc = await spawn(env, "-m", "streams.timer_process", "--worker-id", "test:1")
    try:
        assert proc.stderr is not None and proc.stdin is not None
        head = await lines_until(proc.stderr, "timer_process_started", 60)
        proc.stdin.close()
        _, rest = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    records = parsed(head + rest)
    assert all(r.get("process") == "timer-process" for r in records), records[:3]
    actions = [r["action"] for r in records]
    assert "timer_process_started" in actions and "timer_process_stopped" in actions, actions
