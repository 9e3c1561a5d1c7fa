"""Startup wait: capped backoff, one log line per retry, config errors stop at once, optional limit."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Iterator

import asyncpg
import pytest

from streams.settings import ConfigError, load_settings
from streams.startup_wait import (
    Backoff,
    Dependency,
    DependencyConfigError,
    DependencyTimeout,
    postgres_dependency,
    wait_for,
)


class FakeClock:
    """Monotonic time that moves only when the fake sleep sleeps."""

    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.t

    def now(self):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


def failing(errors: Iterator[BaseException | None]) -> Callable[[], object]:
    async def probe() -> None:
        exc = next(errors)
        if exc is not None:
            raise exc

    return probe


def test_backoff_doubles_and_is_capped() -> None:
    b = Backoff(initial=0.5, factor=2.0, cap=5.0)
    assert [b.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


async def test_transient_errors_are_retried_with_one_line_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    errs = iter([ConnectionRefusedError(), ConnectionRefusedError(), OSError(), None])
    dep = Dependency("postgres", "DATABASE_URL", failing(errs))  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="streams.startup_wait"):
        waited = await wait_for([dep], clock=clock, sleep=clock.sleep)
    assert clock.sleeps == [0.5, 1.0, 2.0] and waited == 3.5
    lines = [r.getMessage() for r in caplog.records if "waiting_for_dependency" in r.getMessage()]
    assert len(lines) == 3
    assert lines[0].startswith(
        "action=waiting_for_dependency dependency=postgres setting=DATABASE_URL"
        " error=ConnectionRefusedError retry_in_s=0.5 waited_s=0"
    )
    assert "retry_in_s=2.0 waited_s=2" in lines[2]
    assert any(
        "action=dependency_ready dependency=postgres" in r.getMessage() for r in caplog.records
    )


async def test_dependencies_are_waited_for_in_order() -> None:
    clock = FakeClock()
    calls: list[str] = []

    def probe(name: str, errors: list[BaseException | None]) -> Callable[[], object]:
        async def run() -> None:
            calls.append(name)
            exc = errors.pop(0)
            if exc is not None:
                raise exc

        return run

    pg = Dependency("postgres", "DATABASE_URL", probe("pg", [OSError(), None]))  # type: ignore[arg-type]
    kafka = Dependency("kafka", "KAFKA_BOOTSTRAP", probe("kafka", [TimeoutError(), None]))  # type: ignore[arg-type]
    await wait_for([pg, kafka], clock=clock, sleep=clock.sleep)
    assert calls == ["pg", "pg", "kafka", "kafka"]


async def test_configuration_error_stops_at_once_naming_the_setting() -> None:
    clock = FakeClock()
    dep = postgres_dependency("postgresql://u@127.0.0.1:1/db")
    errors = iter([OSError(), asyncpg.InvalidCatalogNameError('database "db" does not exist')])
    dep = Dependency(dep.name, dep.setting, failing(errors), dep.config_problem)  # type: ignore[arg-type]
    with pytest.raises(DependencyConfigError, match="setting DATABASE_URL: the database does not"):
        await wait_for([dep], clock=clock, sleep=clock.sleep)
    assert clock.sleeps == [0.5]  # one transient retry, then no more


def test_postgres_config_errors_are_classified_and_the_password_masked() -> None:
    dep = postgres_dependency("postgresql://u:hunter2@127.0.0.1:5432/db")
    auth = dep.config_problem(asyncpg.InvalidPasswordError("password authentication failed"))
    assert auth is not None and auth.startswith("PostgreSQL refused the login")
    masked = dep.config_problem(ValueError("bad port in u:hunter2@127.0.0.1"))
    assert masked is not None and "hunter2" not in masked and "malformed URL" in masked
    assert dep.config_problem(ConnectionRefusedError()) is None
    assert dep.config_problem(asyncpg.CannotConnectNowError("starting up")) is None


def test_an_untrusted_postgres_certificate_names_sslrootcert_not_a_malformed_url() -> None:
    dep = postgres_dependency("postgresql://u@db:5432/db?sslmode=verify-full")
    exc = ssl.SSLCertVerificationError(1, "certificate verify failed")
    problem = dep.config_problem(exc)
    assert problem is not None and "TLS certificate is not trusted (sslrootcert)" in problem


async def test_unexpected_exception_is_a_bug_and_propagates() -> None:
    clock = FakeClock()
    dep = Dependency("kafka", "KAFKA_BOOTSTRAP", failing(iter([KeyError("x")])))  # type: ignore[arg-type]
    with pytest.raises(KeyError):
        await wait_for([dep], clock=clock, sleep=clock.sleep)


async def test_limit_stops_the_wait_with_the_setting_to_check() -> None:
    clock = FakeClock()
    errs = iter([ConnectionRefusedError()] * 100)
    dep = Dependency("kafka", "KAFKA_BOOTSTRAP", failing(errs))  # type: ignore[arg-type]
    with pytest.raises(DependencyTimeout, match=r"STARTUP_WAIT_SECONDS=3.*KAFKA_BOOTSTRAP"):
        await wait_for([dep], limit_s=3, clock=clock, sleep=clock.sleep)
    # 0.5 + 1.0 + 1.5 (the last delay is cut to the limit), then it gives up.
    assert clock.sleeps == [0.5, 1.0, 1.5]


def test_startup_wait_seconds_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().startup_wait_seconds == 0
    monkeypatch.setenv("STARTUP_WAIT_SECONDS", "-1")
    with pytest.raises(ConfigError, match="STARTUP_WAIT_SECONDS"):
        load_settings()


@pytest.mark.parametrize("bootstrap", ["127.0.0.1:x", "a:1,,b:2", ":9092", "h:70000"])
def test_malformed_kafka_bootstrap_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, bootstrap: str
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP", bootstrap)
    with pytest.raises(ConfigError, match="KAFKA_BOOTSTRAP"):
        load_settings()


async def test_the_wait_keeps_each_dependencys_status_for_the_startup_health() -> None:
    """What the startup /health shows: a dependency not probed yet is waiting, one that
    failed says with what, one that answered is ok."""
    clock = FakeClock()
    status: dict[str, str] = {}
    seen: list[dict[str, str]] = []
    pg_errors = iter([ConnectionRefusedError(), None])
    kafka_errors = iter([TimeoutError(), None])

    async def pg() -> None:
        seen.append(dict(status))
        exc = next(pg_errors)
        if exc is not None:
            raise exc

    async def kafka() -> None:
        seen.append(dict(status))
        exc = next(kafka_errors)
        if exc is not None:
            raise exc

    deps = [
        Dependency("postgres", "DATABASE_URL", pg),
        Dependency("kafka", "KAFKA_BOOTSTRAP", kafka),
    ]
    await wait_for(deps, clock=clock, sleep=clock.sleep, status=status)  # type: ignore[arg-type]
    assert seen == [
        {"postgres": "waiting", "kafka": "waiting"},
        {"postgres": "waiting: ConnectionRefusedError", "kafka": "waiting"},
        {"postgres": "ok", "kafka": "waiting"},
        {"postgres": "ok", "kafka": "waiting: TimeoutError"},
    ]
    assert status == {"postgres": "ok", "kafka": "ok"}
