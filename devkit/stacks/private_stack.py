"""A private Kafka + PostgreSQL started with stack/stack.sh, for tests that kill the broker or
restart the database (the shared stack must never be touched by them).

Everything lives under a temporary ``DEV_DIR`` on free ports; the Kafka jars already
resolved for the main stack are linked in, so no Maven run is needed when they exist.
``down()`` (and an ``atexit`` hook, in case a test runner dies half-way) stops both.

``PrivateStack(durable=True)`` runs PostgreSQL with fsync, synchronous_commit and
full_page_writes on (stack.sh turns them off for speed by default; with them off a crash
may forget committed transactions, so a fault test could not tell a lost effect from a lost
commit). That is stack.sh's own ``STACK_PG_DURABLE=1``, the one way to it; ``up()`` then
reads the three settings back from the server and refuses a stack that is not durable.
``pg_ctl restart`` (the immediate restarts) starts the server again with the options it
was started with (postmaster.opts), so it stays durable.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from devkit.workers import ROOT, free_port

STACK = ROOT / "stack" / "stack.sh"


def kafka_version() -> str:
    pom = (ROOT / "stack" / "kafka" / "pom.xml").read_text()
    match = re.search(r"<kafka.version>(.*?)</kafka.version>", pom)
    assert match, "stack/kafka/pom.xml has no <kafka.version>"
    return match.group(1)


def _process_gone(pid: int) -> bool:
    """True once ``pid`` no longer runs (exited, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in {"Z", "X"}


class PrivateStack:
    """Kafka (KRaft, one JVM) and PostgreSQL of this test only."""

    DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}

    def __init__(
        self, base: Path | None = None, *, durable: bool = False, auto_create_topics: bool = True
    ) -> None:
        self.durable = durable
        self.dev_dir = Path(tempfile.mkdtemp(prefix="private-stack-", dir=base))
        self.kafka_port = free_port()
        self.controller_port = free_port()
        self.pg_port = free_port()
        self.env = {
            **os.environ,
            "DEV_DIR": str(self.dev_dir),
            "KAFKA_PORT": str(self.kafka_port),
            "KAFKA_CONTROLLER_PORT": str(self.controller_port),
            "PG_PORT": str(self.pg_port),
            "READY_TIMEOUT": "120",
            "STACK_PG_DURABLE": "1" if durable else "0",
            "STACK_KAFKA_AUTO_CREATE": "true" if auto_create_topics else "false",
        }
        self.bootstrap = f"127.0.0.1:{self.kafka_port}"
        self.database_url = f"postgresql://reminders@127.0.0.1:{self.pg_port}/reminders"
        self._up = False
        self._share_kafka_jars()

    # ------------------------------------------------------------------ lifecycle

    def _share_kafka_jars(self) -> None:
        """Link the main stack's resolved jars (same Kafka version) instead of running Maven."""
        version = kafka_version()
        main_dev = Path(os.environ.get("DEV_DIR") or ROOT / ".dev")  # the main stack's
        libs = main_dev / "kafka" / f"libs-{version}"
        if (libs / ".complete").exists():
            (self.dev_dir / "kafka").mkdir(parents=True, exist_ok=True)
            (self.dev_dir / "kafka" / f"libs-{version}").symlink_to(libs.resolve())
        # Otherwise stack.sh resolves them (from the local Maven repository when cached).

    def _stack(self, command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(STACK), command],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def up(self, *, kafka: bool = True) -> PrivateStack:
        """Start the stack; ``kafka=False``: PostgreSQL only (the test uses the shared
        Kafka)."""
        self._up = True
        atexit.register(self.down)
        out = self._stack("up" if kafka else "pg-up")
        if out.returncode != 0:
            raise AssertionError(f"private stack did not start:\n{out.stderr[-3000:]}")
        if self.durable:
            self._check_durable()
        return self

    def _check_durable(self) -> None:
        got = self.settings(*self.DURABLE)
        if got != self.DURABLE:
            raise AssertionError(f"STACK_PG_DURABLE=1 gave a PostgreSQL that is not durable: {got}")

    def settings(self, *names: str) -> dict[str, str]:
        """``SHOW name`` for each name, as the server runs now."""
        return {name: self.psql(f"SHOW {name}").strip() for name in names}

    def psql(self, sql: str, database: str = "postgres") -> str:
        psql = [str(self._pg_bin() / "psql"), "-h", "127.0.0.1", "-p", str(self.pg_port)]
        out = subprocess.run(
            [*psql, "-U", "reminders", "-d", database, "-tA", "-v", "ON_ERROR_STOP=1", "-c", sql],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if out.returncode != 0:
            raise AssertionError(f"psql failed: {out.stderr}")
        return out.stdout

    def down(self) -> None:
        if not self._up:
            return
        self._up = False
        with contextlib.suppress(Exception):
            self._stack("down", timeout=120)
        pid = self.kafka_pid()
        if pid is not None:  # stack.sh gave up on it: do not leave a JVM behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.dev_dir, ignore_errors=True)
        with contextlib.suppress(Exception):
            atexit.unregister(self.down)

    # ------------------------------------------------------------------ Kafka faults

    def kafka_pid(self) -> int | None:
        try:
            pid = int((self.dev_dir / "kafka" / "kafka.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        return None if _process_gone(pid) else pid

    def kill_broker(self, timeout: float = 30.0) -> int:
        """SIGKILL the broker JVM and wait until it is really gone; returns its pid.

        "Gone" means reaped: stack.sh asks ``kill -0``, which a zombie still answers, and
        would then take the dead broker for a running one.
        """
        pid = self.kafka_pid()
        assert pid is not None, "private Kafka is not running"
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _process_gone(pid), f"Kafka pid {pid} still alive after SIGKILL"
        if Path(f"/proc/{pid}").exists():  # a zombie nobody reaps: make stack.sh start anew
            (self.dev_dir / "kafka" / "kafka.pid").unlink(missing_ok=True)
        return pid

    def start_broker(self, attempts: int = 3) -> None:
        """Start Kafka again (stack.sh up: PostgreSQL is left as it is)."""
        for attempt in range(1, attempts + 1):
            out = self._stack("up")
            if out.returncode == 0:
                return
            if attempt == attempts:
                raise AssertionError(f"private Kafka did not restart:\n{out.stderr[-3000:]}")
            time.sleep(1)

    # ------------------------------------------------------------------ PostgreSQL faults

    def _pg_bin(self) -> Path:
        bins = sorted(
            Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
            key=lambda p: [int(x) for x in re.findall(r"\d+", p.parent.parent.name)],
        )
        assert bins, "pg_ctl not found under /usr/lib/postgresql/*/bin"
        return bins[-1].parent

    def pg_ctl(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        data = self.dev_dir / "postgres" / "data"
        cmd = [str(self._pg_bin() / "pg_ctl"), "-D", str(data), *args]
        if os.geteuid() == 0:  # stack.sh runs the server as 'postgres' when root
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd="/"
        )

    def stop_postgres(self) -> None:
        """``pg_ctl -m fast stop``: the server ends every session and is gone until
        ``start_postgres``."""
        out = self.pg_ctl("-m", "fast", "-w", "-t", "60", "stop")
        if out.returncode != 0 and self.pg_ctl("status").returncode != 3:  # 3: not running
            raise AssertionError(f"pg_ctl stop failed ({out.returncode}): {out.stdout}{out.stderr}")

    def start_postgres(self) -> None:
        """Start the stopped server again (stack.sh pg-up: same port and mode)."""
        out = self._stack("pg-up")
        if out.returncode != 0:
            raise AssertionError(f"PostgreSQL did not start again:\n{out.stderr[-3000:]}")

    def restart_postgres_immediate(self) -> None:
        """``pg_ctl -m immediate restart``: every session dies without a checkpoint (crash
        recovery on start), as after a power cut of the database host."""
        log = self.dev_dir / "postgres" / "postgres.log"
        out = self.pg_ctl("-m", "immediate", "-w", "-t", "120", "-l", str(log), "restart")
        if out.returncode != 0:
            raise AssertionError(f"pg_ctl restart failed: {out.stdout}\n{out.stderr}")
