"""Wait at startup until PostgreSQL and Kafka answer; stop at once on bad configuration.

The dependencies (a probe and what counts as a configuration error for each) and
``wait_for``, the bounded wait with backoff; the worker's gate that runs them in order is
streams/startup_gate.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import asyncpg
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError, KafkaError, SaslAuthenticationFailed

from streams import logs
from streams.clock import Clock, SystemClock

log = logging.getLogger("streams.startup_wait")

# asyncpg raises these for a reachable server that says "not like this": retrying does not help.
_PG_CONFIG_ERRORS: tuple[tuple[type[BaseException], str], ...] = (
    (asyncpg.InvalidAuthorizationSpecificationError, "PostgreSQL refused the login"),
    (asyncpg.InvalidCatalogNameError, "the database does not exist"),
    (asyncpg.InsufficientPrivilegeError, "the role may not connect to the database"),
    # Before ValueError, which it also is: sslmode=verify-ca/verify-full and a server
    # certificate the sslrootcert (or PGSSLROOTCERT) file does not vouch for.
    (ssl.SSLCertVerificationError, "PostgreSQL's TLS certificate is not trusted (sslrootcert)"),
    (ValueError, "malformed URL"),  # includes asyncpg's ClientConfigurationError
)
# Errors that mean "not there yet / not ready yet": wait and retry.
_TRANSIENT: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    KafkaError,
)


class DependencyConfigError(Exception):
    """A dependency rejected the configuration; the message names the setting."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"setting {setting}: {problem}")
        self.setting = setting


class DependencyTimeout(Exception):
    """STARTUP_WAIT_SECONDS ran out before a dependency answered."""


@dataclass(frozen=True)
class Backoff:
    """Delay before retry ``attempt`` (1-based): initial * factor**(attempt-1), capped."""

    initial: float = 0.5
    factor: float = 2.0
    cap: float = 5.0

    def delay(self, attempt: int) -> float:
        return float(min(self.cap, self.initial * self.factor ** max(0, attempt - 1)))


@dataclass(frozen=True)
class Dependency:
    """One thing the worker needs before it starts: a probe that raises while it is not ready,
    and a classifier that turns a configuration error into a message (None = transient)."""

    name: str
    setting: str
    probe: Callable[[], Awaitable[None]]
    config_problem: Callable[[BaseException], str | None] = field(default=lambda exc: None)


def _redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


def postgres_dependency(database_url: str, timeout: float = 10.0) -> Dependency:
    try:
        password = urlsplit(database_url).password
    except ValueError:
        password = None

    async def probe() -> None:
        conn = await asyncpg.connect(database_url, timeout=timeout)
        await conn.close(timeout=timeout)

    def config_problem(exc: BaseException) -> str | None:
        for kind, problem in _PG_CONFIG_ERRORS:
            if isinstance(exc, kind):
                # Server messages name the role or database, never a value; a password
                # the URL parser echoes back is masked all the same.
                return f"{problem}: {_redact(str(exc), password)} ({type(exc).__name__})"
        return None

    return Dependency("postgres", "DATABASE_URL", probe, config_problem)


def postgres_refusal(exc: BaseException, database_url: str) -> str | None:
    """The problem a refusal by PostgreSQL (a login, a database, a certificate) is, named for
    DATABASE_URL; None for anything else (a bug's ValueError is not a malformed URL here)."""
    if not isinstance(exc, asyncpg.PostgresError | ssl.SSLCertVerificationError):
        return None
    return postgres_dependency(database_url).config_problem(exc)


class KafkaRefused(Exception):
    """Kafka answered, and said no to this configuration; ``setting`` names what to fix."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(problem)
        self.setting = setting


class _ConnectErrors(logging.Handler):
    """The reasons aiokafka logs for each failed bootstrap connection (it raises only a
    generic "Unable to bootstrap" error after them)."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        if args and isinstance(args[-1], BaseException):
            self.errors.append(args[-1])


def _refusal(errors: Sequence[BaseException], mechanism: str) -> KafkaRefused | None:
    for err in errors:
        if isinstance(err, SaslAuthenticationFailed):
            return KafkaRefused(
                "KAFKA_SASL_PASSWORD",
                f"the broker refused the login of KAFKA_SASL_USERNAME with {mechanism}"
                " (wrong user name or password, or a mechanism the broker does not enable)",
            )
        if isinstance(err, ssl.SSLCertVerificationError):
            return KafkaRefused(
                "KAFKA_SSL_CAFILE",
                f"the broker's TLS certificate is not trusted ({err.verify_message})",
            )
        if isinstance(err, ssl.SSLError):
            return KafkaRefused(
                "KAFKA_SECURITY_PROTOCOL", f"TLS with the broker failed ({err.reason})"
            )
    return None


def kafka_dependency(
    bootstrap: str,
    timeout_ms: int = 10_000,
    options: dict[str, Any] | None = None,
    *,
    replication_factor: int = 1,
) -> Dependency:
    """``options``: the clients' security settings (``streams.kafka_client``). A refused
    login, an untrusted certificate, or a cluster with fewer brokers than
    ``replication_factor`` is a configuration error, not an outage."""
    options = options or {}

    async def probe() -> None:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms, **options
        )
        seen = _ConnectErrors()
        client_log = logging.getLogger("aiokafka")  # aiokafka.client logs as "aiokafka"
        client_log.addHandler(seen)
        try:
            with _propagating(client_log, False):
                try:
                    await admin.start()  # bootstrap = a metadata request answered by a broker
                except KafkaConnectionError:
                    refused = _refusal(seen.errors, str(options.get("sasl_mechanism", "")))
                    if refused is not None:
                        raise refused from None
                    raise
                brokers = len((await admin.describe_cluster())["brokers"])
        finally:
            client_log.removeHandler(seen)
            await admin.close()
        if brokers < replication_factor:
            raise KafkaRefused(
                "KAFKA_REPLICATION_FACTOR",
                f"is {replication_factor}, but the cluster at KAFKA_BOOTSTRAP has"
                f" {brokers} live broker(s)",
            )

    def config_problem(exc: BaseException) -> str | None:
        if isinstance(exc, KafkaRefused):
            return str(exc)
        if isinstance(exc, ValueError):
            return f"{exc} ({type(exc).__name__})"
        return None

    return Dependency("kafka", "KAFKA_BOOTSTRAP", probe, config_problem)


@contextlib.contextmanager
def _propagating(logger: logging.Logger, on: bool) -> Iterator[None]:
    before = logger.propagate
    logger.propagate = on
    try:
        yield
    finally:
        logger.propagate = before


async def wait_for(
    deps: Sequence[Dependency],
    *,
    limit_s: float = 0.0,
    backoff: Backoff | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    status: dict[str, str] | None = None,
    waited_before: float = 0.0,
) -> float:
    """Probe each dependency in turn until it answers. Returns the seconds waited in all
    (``waited_before``, already spent on earlier dependencies, included).

    ``limit_s`` > 0 bounds the whole wait (DependencyTimeout); 0 waits forever. A
    configuration error raises DependencyConfigError at once; an unexpected exception
    (a bug, not an outage) propagates. ``status`` (the startup /health) is kept per
    dependency: ``waiting``, ``waiting: <error class>`` or ``ok``.
    """
    backoff = backoff or Backoff()
    clock = clock or SystemClock()
    started = clock.monotonic() - waited_before
    status = {} if status is None else status
    for dep in deps:
        status.setdefault(dep.name, "waiting")
    for dep in deps:
        attempt = 0
        while True:
            try:
                await dep.probe()
            except Exception as exc:
                status[dep.name] = f"waiting: {type(exc).__name__}"
                problem = dep.config_problem(exc)
                if problem is not None:
                    raise DependencyConfigError(
                        getattr(exc, "setting", dep.setting), problem
                    ) from None
                if not isinstance(exc, _TRANSIENT):
                    raise
                attempt += 1
                waited = clock.monotonic() - started
                delay = backoff.delay(attempt)
                if limit_s > 0:
                    if waited >= limit_s:
                        raise DependencyTimeout(
                            f"{dep.name} did not answer within STARTUP_WAIT_SECONDS={limit_s:g}"
                            f" (last error {type(exc).__name__}; check {dep.setting})"
                        ) from None
                    delay = min(delay, limit_s - waited)
                logs.event(
                    log,
                    logging.WARNING,
                    "waiting_for_dependency",
                    dependency=dep.name,
                    setting=dep.setting,
                    error=type(exc).__name__,
                    retry_in_s=delay,
                    waited_s=round(waited),
                    attempt=attempt,
                )
                await sleep(delay)
                continue
            status[dep.name] = "ok"
            logs.event(
                log,
                logging.INFO,
                "dependency_ready",
                dependency=dep.name,
                waited_s=clock.monotonic() - started,
            )
            break
    return clock.monotonic() - started
