"""A worker started before PostgreSQL or Kafka waits for them, then becomes ready; bad
configuration stops it at once with exit code 2 and the setting's name."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from devkit.database import with_database
from devkit.stacks.pause import process_state
from devkit.stacks.proxy import TcpProxy
from devkit.wait import NotWithin, eventually
from devkit.workers import ROOT, WorkerProcess, free_port, worker_env
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e


def with_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


async def wait_for_log(worker: WorkerProcess, needle: str, timeout: float = 30.0) -> str:
    def log_with_needle() -> str | None:
        assert worker.proc is not None
        text = worker.log_path.read_text(errors="replace") if worker.log_path.exists() else ""
        if needle in text:
            return text
        if worker.proc.poll() is not None:
            raise AssertionError(f"worker exited with {worker.proc.returncode}:\n{worker.tail()}")
        return None

    try:
        found = await eventually(log_with_needle, timeout=timeout, what=f"{needle!r} in the log")
    except NotWithin:
        raise NotWithin(
            f"{needle!r} not in the worker log within {timeout}s:\n{worker.tail()}"
        ) from None
    assert found is not None
    return found


@pytest.fixture
def prefix(kafka_bootstrap: str) -> str:
    p = f"w{uuid.uuid4().hex[:10]}."
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=p)
    asyncio.run(ensure_topics(settings, contract_topic_names(settings)))
    return p


async def test_worker_waits_for_postgres_then_becomes_ready(
    module_database_url: str, kafka_bootstrap: str, prefix: str, module_tmp: Path
) -> None:
    proxy_port = free_port()
    pg = urlsplit(module_database_url)
    env = worker_env(with_port(module_database_url, proxy_port), kafka_bootstrap, prefix)
    worker = WorkerProcess(env, module_tmp, "wait-pg").start()
    proxy = TcpProxy(proxy_port, pg.hostname or "127.0.0.1", pg.port or 5432)
    try:
        log = await wait_for_log(worker, "action=waiting_for_dependency dependency=postgres")
        assert "setting=DATABASE_URL error=ConnectionRefusedError retry_in_s=" in log
        # Still waiting a couple of retries later, not exited.
        await wait_for_log(worker, "attempt=3")
        assert worker.proc is not None and worker.proc.poll() is None
        assert "dependency=kafka" not in log  # PostgreSQL first
        proxy.start()
        health = await worker.wait_ready()
        assert health["postgres"] == "ok" and proxy.connections > 0
        assert "action=dependency_ready dependency=kafka" in worker.log_path.read_text()
    finally:
        worker.stop()
        proxy.stop()


async def test_worker_waits_for_kafka_then_becomes_ready(
    module_database_url: str, kafka_bootstrap: str, prefix: str, module_tmp: Path
) -> None:
    proxy_port = free_port()
    env = worker_env(module_database_url, f"127.0.0.1:{proxy_port}", prefix)
    worker = WorkerProcess(env, module_tmp, "wait-kafka").start()
    proxy = TcpProxy(proxy_port, *host_port(kafka_bootstrap))
    try:
        log = await wait_for_log(worker, "action=waiting_for_dependency dependency=kafka")
        assert "setting=KAFKA_BOOTSTRAP error=KafkaConnectionError retry_in_s=" in log
        assert "action=dependency_ready dependency=postgres" in log
        await wait_for_log(worker, "attempt=3")
        assert worker.proc is not None and worker.proc.poll() is None
        proxy.start()
        health = await worker.wait_ready()
        assert health["kafka"] == "ok" and proxy.connections > 0
    finally:
        worker.stop()
        proxy.stop()


async def test_a_worker_waiting_for_kafka_answers_health_and_its_timer_process_ends_with_it(
    module_database_url: str, module_tmp: Path
) -> None:
    """While it waits for Kafka the worker's timer process runs (it needs only PostgreSQL) and
    a startup /health says what is missing; a worker that gives up (STARTUP_WAIT_SECONDS)
    stops its timer process before it exits."""
    env = worker_env(
        module_database_url,
        f"127.0.0.1:{free_port()}",  # nothing listens: Kafka is down
        "unused.",
        STARTUP_WAIT_SECONDS="15",
    )
    worker = WorkerProcess(env, module_tmp, "give-up-kafka").start()
    try:
        status, health = await eventually(
            lambda: _get(worker, "/health"),
            # The timer process may be up before the first connection to Kafka has failed.
            until=lambda answer: (
                answer is not None
                and answer[1].get("timer_process") == "ok"
                and answer[1].get("kafka") != "waiting"
            ),
            timeout=60,
            what="the startup /health with the timer process ok and Kafka's first failure",
        )
        assert status == 503 and health["status"] == "starting", health
        assert health["postgres"] == "ok", health
        assert health["kafka"] == "waiting: KafkaConnectionError", health
        assert _get(worker, "/health/live") == (200, {"status": "alive"})
        pids = worker.pids
        assert len(pids) == 2, pids  # the worker and its timer process
        assert worker.proc is not None
        code = await asyncio.to_thread(worker.proc.wait, 60)
        assert code == 1, worker.tail()
        log = worker.tail(1000)
        assert "kafka did not answer within STARTUP_WAIT_SECONDS=15" in log
        assert "action=timer_process_stopped" in log
        assert all(process_state(pid) in {"", "Z"} for pid in pids[1:]), "an orphan"
    finally:
        worker.kill()


def _get(worker: WorkerProcess, path: str) -> tuple[int, Any] | None:
    try:
        return worker.get(path)
    except OSError:  # not listening yet
        return None


@pytest.mark.parametrize(
    ("database", "user", "message"),
    [
        ("no_such_db_here", None, 'the database does not exist: database "no_such_db_here"'),
        (None, "no_such_role", 'PostgreSQL refused the login: role "no_such_role"'),
    ],
)
def test_bad_database_configuration_exits_2_naming_the_setting(
    module_database_url: str,
    kafka_bootstrap: str,
    tmp_path: Path,
    database: str | None,
    user: str | None,
    message: str,
) -> None:
    url = with_database(module_database_url, database) if database else module_database_url
    if user:
        parts = urlsplit(url)
        url = urlunsplit(parts._replace(netloc=f"{user}@{parts.hostname}:{parts.port}"))
    env = {
        **worker_env(url, kafka_bootstrap, "unused."),
        "WORKER_DATA_DIR": str(tmp_path),
        "WEB_PORT": str(free_port()),
    }
    done = subprocess.run(
        [sys.executable, "-m", "streams", "worker"],
        cwd=ROOT,
        env={**_base_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert f"error: setting DATABASE_URL: {message}" in done.stderr
    assert "waiting_for_dependency" not in done.stderr


def test_startup_wait_limit_exits_1(
    module_database_url: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    env = {
        **worker_env(with_port(module_database_url, free_port()), kafka_bootstrap, "unused."),
        "WORKER_DATA_DIR": str(tmp_path),
        "WEB_PORT": str(free_port()),
        "STARTUP_WAIT_SECONDS": "2",
    }
    done = subprocess.run(
        [sys.executable, "-m", "streams", "worker"],
        cwd=ROOT,
        env={**_base_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "waiting_for_dependency dependency=postgres" in done.stderr
    assert "postgres did not answer within STARTUP_WAIT_SECONDS=2" in done.stderr


def _base_env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def test_a_connection_budget_the_server_cannot_hold_exits_2_naming_both(
    module_database_url: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Against the real server's SHOW max_connections: a budget one over what it allows."""
    import asyncpg

    async def available() -> tuple[int, int]:
        conn = await asyncpg.connect(module_database_url)
        try:
            m = int(await conn.fetchval("SHOW max_connections"))
            r = int(await conn.fetchval("SHOW superuser_reserved_connections"))
            extra = await conn.fetchval("SELECT current_setting('reserved_connections', true)")
            return m, m - r - int(extra or 0)
        finally:
            await conn.close()

    max_connections, free = asyncio.run(available())
    env = {
        **worker_env(module_database_url, kafka_bootstrap, "unused."),
        "WORKER_DATA_DIR": str(tmp_path),
        "WEB_PORT": str(free_port()),
        "DB_MAX_CONNECTIONS_PER_WORKER": str(free + 1),
    }
    done = subprocess.run(
        [sys.executable, "-m", "streams", "worker"],
        cwd=ROOT,
        env={**_base_env(), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert (
        f"error: setting DB_MAX_CONNECTIONS_PER_WORKER: DB_MAX_CONNECTIONS_PER_WORKER={free + 1}"
        in (done.stderr)
    )
    assert f"max_connections={max_connections}" in done.stderr
