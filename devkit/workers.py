"""Start real worker processes the way a user does (``python -m streams worker``) and stop them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from devkit.wait import NotWithin, eventually

ROOT = Path(__file__).resolve().parents[1]


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a worker and its timer process), parents first."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        tree.append(current)
        todo.extend(sorted(children.get(current, [])))
    return tree


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WorkerProcess:
    """One worker with its own web port and data dir; logs to ``log_path``.

    A worker is two OS processes (the worker and its timer process, streams/timer_process),
    started in a session of their own: ``kill()`` kills both at once, as a crashed host or
    container would; ``stop(SIGTERM)`` signals the worker only, which stops its child itself
    (what an orchestrator's stop does).
    """

    def __init__(
        self, env: dict[str, str], data_dir: Path, name: str = "worker", *, root: Path = ROOT
    ) -> None:
        self.port = free_port()
        self.name = name
        self.root = root  # the source tree it runs (another release's, for an upgrade test)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = data_dir / f"{name}.log"
        self.env = {
            **os.environ,
            **env,
            "WEB_PORT": str(self.port),
            "WORKER_DATA_DIR": str(data_dir / name),
            "PYTHONUNBUFFERED": "1",
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streams", "worker"],
            cwd=self.root,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self

    @property
    def pids(self) -> list[int]:
        """The worker's processes: the worker first, then its timer process."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        return process_tree(self.proc.pid)

    def signal_all(self, sig: int) -> None:
        """Send ``sig`` to every process of the worker (its process group)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def get(self, path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                body = r.read()
                return r.status, json.loads(body) if body[:1] in b"{[" else body.decode()
        except urllib.error.HTTPError as exc:
            body = exc.read()
            return exc.code, json.loads(body) if body[:1] in b"{[" else body.decode()

    async def wait_ready(self, timeout: float = 90.0) -> dict[str, Any]:
        """Wait until /health says ready (Kafka, PostgreSQL, recovery, partitions assigned)."""
        last: Any = None

        async def ready() -> dict[str, Any] | None:
            nonlocal last
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}"
                )
            with contextlib.suppress(OSError):
                status, last = await asyncio.to_thread(self.get, "/health")
                if status == 200 and last.get("assigned_partitions", 0) > 0:
                    return dict(last)
            return None

        try:
            found: dict[str, Any] | None = await eventually(
                ready, timeout=timeout, what=f"{self.name} ready", interval=0.25
            )
        except NotWithin:
            raise NotWithin(
                f"{self.name} not ready in {timeout}s (last {last}):\n{self.tail()}"
            ) from None
        assert found is not None
        return found

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        if sig == signal.SIGKILL:
            self.kill()
            return self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL the worker and its timer process together."""
        if self.proc is not None and self.proc.poll() is None:
            self.signal_all(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"


def worker_env(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, **extra: str
) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "KAFKA_BOOTSTRAP": kafka_bootstrap,
        "TOPIC_PREFIX": topic_prefix,
        "APP_ID": f"{topic_prefix}reminders",
        "TOPIC_PARTITIONS": "4",
        **extra,
    }
