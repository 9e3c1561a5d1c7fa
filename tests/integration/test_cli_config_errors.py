"""The commands a Helm hook or an operator runs (``streams migrate``, ``streams topics``) stop on
a configuration PostgreSQL or Kafka refuses with exit 2 and one line naming the setting: no
traceback, no secret (the worker's behaviour, tests/e2e/test_secured_kafka.py for SASL/TLS)."""

from __future__ import annotations

import os
import time
from urllib.parse import urlsplit, urlunsplit

import pytest

from devkit.stacks.stack_shapes import streams_cli
from tests.conftest import DATABASE_URL

pytestmark = pytest.mark.timeout(120)


def with_url(**parts: str) -> str:
    url = urlsplit(DATABASE_URL)
    host = f"{url.hostname}:{url.port}"
    netloc = f"{parts.get('user', url.username)}:{parts.get('password', 'p4ss-w0rd')}@{host}"
    return urlunsplit(url._replace(netloc=netloc, path=parts.get("path", url.path)))


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (with_url(user="no_such_role_x"), "PostgreSQL refused the login"),
        (with_url(path="/no_such_database_x"), "the database does not exist"),
    ],
)
def test_migrate_names_database_url_for_a_refused_login_or_an_unknown_database(
    url: str, problem: str
) -> None:
    started = time.monotonic()
    done = streams_cli({**os.environ, "DATABASE_URL": url}, "migrate", timeout=60)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "setting DATABASE_URL" in output and problem in output, output[-3000:]
    assert "Traceback" not in output
    assert "p4ss-w0rd" not in output
    assert time.monotonic() - started < 30, "a refused configuration is not waited for"


def test_topics_waits_at_most_startup_wait_seconds_for_kafka_and_says_so() -> None:
    env = {**os.environ, "KAFKA_BOOTSTRAP": "127.0.0.1:1", "STARTUP_WAIT_SECONDS": "2"}
    done = streams_cli(env, "topics", timeout=60)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert "STARTUP_WAIT_SECONDS=2" in output and "KAFKA_BOOTSTRAP" in output, output[-3000:]
    assert "Traceback" not in output


@pytest.mark.parametrize(
    "command",
    [["outbox", "parked"], ["explain", "00000000-0000-0000-0000-000000000001"]],
)
def test_an_operators_command_names_database_url_when_postgresql_refuses(
    command: list[str],
) -> None:
    env = {**os.environ, "DATABASE_URL": with_url(user="no_such_role_x")}
    done = streams_cli(env, *command, timeout=60)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "setting DATABASE_URL: PostgreSQL refused the login" in output, output[-3000:]
    assert "Traceback" not in output and "p4ss-w0rd" not in output
