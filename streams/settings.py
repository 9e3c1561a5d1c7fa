"""Service settings from the environment, validated once at startup: the core ``Settings``
here, each slice's own class in ``streams/slices/<name>/settings.py`` (``Settings.of``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Self, TypeVar

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from streams import logs

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class ConfigError(Exception):
    """Bad configuration: the message names the setting; the worker must not start."""


S = TypeVar("S", bound=BaseSettings)


# The shortest WEB_ADMIN_TOKEN accepted (a guessable token would guard nothing).
WEB_ADMIN_TOKEN_MIN_CHARS = 32


class Settings(BaseSettings):
    """The service's own knobs (Kafka, PostgreSQL, web, timers, outbox, retention); a slice's
    are in its settings class, read with ``of``. Environment variable = field name in upper
    case."""

    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore")

    # The keyword arguments this instance was built with: the slices' classes get them too,
    # so one call sets every knob (tests: ``Settings(automation_batch_size=5, ...)``).
    _overrides: dict[str, Any] = PrivateAttr(default_factory=dict)
    _slices: dict[type[BaseSettings], BaseSettings] = PrivateAttr(default_factory=dict)

    app_id: str = Field("reminders", min_length=1)
    kafka_bootstrap: str = Field("127.0.0.1:19092", min_length=1)
    # How every Kafka client of the service connects (streams/kafka_client.py builds them).
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    kafka_sasl_username: str = ""
    kafka_sasl_password: SecretStr = SecretStr("")
    # PEM files: the CA that signed the brokers' certificates (default: the system's), and a
    # client certificate + key for brokers that require one (mutual TLS).
    kafka_ssl_cafile: Path | None = None
    kafka_ssl_certfile: Path | None = None
    kafka_ssl_keyfile: Path | None = None
    kafka_ssl_key_password: SecretStr = SecretStr("")
    # Every topic the service creates (contract topics, DLQs, internal topics, changelogs).
    kafka_replication_factor: int = Field(1, ge=1, le=32)
    kafka_min_insync_replicas: int = Field(1, ge=1, le=32)
    # How long the DLQ topics keep a record (retention.ms, set by `streams topics`): long
    # enough for someone to notice, fix and replay; the broker's default is often a day.
    kafka_dlq_retention_hours: float = Field(168.0, ge=1, le=100 * 8760)
    # false: the worker sends no CreateTopics (Faust's topic_allow_declare off, its unused
    # leader topic off); `streams topics` makes Faust's table changelogs as it always does.
    kafka_declare_internal_topics: bool = True
    database_url: str = "postgresql://reminders@127.0.0.1:55432/reminders"
    # Prefix for every topic name; empty in production (topic names are the contract),
    # set by tests so that each test run has topics of its own.
    topic_prefix: str = ""
    topic_partitions: int = Field(4, ge=1)
    worker_data_dir: Path = PROJECT_ROOT / ".dev" / "worker"
    web_host: str = "127.0.0.1"
    web_port: int = Field(6066, ge=1, le=65535)
    # How other workers' status pages link to this one (default http://WEB_HOST:WEB_PORT).
    web_advertised_url: str = ""
    # Turns the console's actions on (POST /console/actions/..., DLQ replay): required as
    # ``Authorization: Bearer <token>`` or through the console's login form; empty = off.
    # Never logged; at least WEB_ADMIN_TOKEN_MIN_CHARS characters.
    web_admin_token: SecretStr = SecretStr("")
    # Puts every read page (/status, /console/..., /timers, /explain, anything not listed as
    # open) behind a token: ``Authorization: Bearer <token>`` (this one or WEB_ADMIN_TOKEN) or
    # a console login with either; without it such a request gets 401. /health, /health/live
    # and /metrics stay open (probes, scrapers). Empty = read pages open. Never logged.
    web_read_token: SecretStr = SecretStr("")
    # The read pages' own PostgreSQL pool (never the worker's): its size, the server-side
    # statement_timeout of its sessions (read-only sessions), and how many read requests may
    # run at once; one more gets 503 with Retry-After at once, it never queues.
    web_read_pool_size: int = Field(1, ge=1, le=20)
    web_read_statement_timeout_seconds: float = Field(5.0, gt=0, le=300)
    web_read_concurrency: int = Field(4, ge=1, le=1000)
    # Slow clients: a connection whose request headers have not all arrived this long after
    # it opened (or after its last response) is closed; a request body not read within
    # WEB_BODY_TIMEOUT_SECONDS gets 408; bodies over WEB_MAX_BODY_BYTES get 413.
    web_header_timeout_seconds: float = Field(10.0, gt=0, le=300)
    web_body_timeout_seconds: float = Field(10.0, gt=0, le=300)
    web_max_body_bytes: int = Field(65_536, ge=1024, le=10 * 1024 * 1024)
    log_level: str = "info"
    # One line per record: text (``<time> <level> <logger> action=... k=v``) or json (one
    # object per line, the same fields as keys); streams/logs.py.
    log_format: Literal["text", "json"] = "text"
    # Levels of single loggers over LOG_LEVEL: ``logger=level,...`` (streams/logs.py's
    # parse_levels), e.g. ``aiokafka=warning,streams.outbox=debug``; the libraries (Faust,
    # aiokafka, asyncpg, ...) stay at info with LOG_LEVEL=debug unless named here.
    log_levels: str = ""
    # The worker's event loop: uvloop (about 15% less CPU per ingested event than asyncio's
    # own loop, measured with the ingest bench) or asyncio.
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"

    # Seconds a starting worker waits for PostgreSQL and Kafka (0 = as long as it takes).
    startup_wait_seconds: float = Field(0.0, ge=0)

    db_pool_min_size: int = Field(1, ge=0)
    db_pool_max_size: int = Field(10, ge=1)
    # Every PostgreSQL connection one worker may open, both processes together (the two pools
    # and the relay's LISTEN connection); each pool gets (this - 1) // processes, at most
    # DB_POOL_MAX_SIZE. Checked at start-up against the server (streams/connection_budget.py).
    db_max_connections_per_worker: int = Field(21, ge=2, le=10_000)
    # Migrations: how long a migrator waits for another's lock (saying who holds it), and how
    # long one of its statements waits for a table lock before the migration fails.
    db_migrate_lock_wait_seconds: float = Field(300.0, gt=0, le=3_600)
    db_migrate_lock_timeout_seconds: float = Field(10.0, gt=0, le=600)
    # A statement waiting longer than this for a lock fails and is retried (55P03).
    db_lock_timeout_seconds: float = Field(5.0, gt=0, le=600)
    # PostgreSQL ends a worker's session idle this long inside a transaction (a paused
    # worker), so its row and lane locks cannot hold the other workers.
    db_idle_in_transaction_timeout_seconds: float = Field(60.0, gt=0, le=3600)

    # Every due, lease and retention comparison uses PostgreSQL's time: each process reads
    # the database's clock this often (streams/clock.py, DatabaseClock); a worker whose own
    # clock is further than CLOCK_SKEW_MAX_SECONDS from it says so and is not ready.
    clock_sync_interval_seconds: float = Field(10.0, gt=0, le=600)
    clock_skew_max_seconds: float = Field(5.0, gt=0, le=86_400)

    # The worker's membership of its consumer group (Faust's own variables, validated here):
    # a worker silent this long (no heartbeat: killed, its host gone, its event loop blocked)
    # is dropped from the group and its partitions go to the others; heartbeats go out this
    # often (and a rebalance is noticed within one); a rebalance waits this long for every
    # member to rejoin. docs/deploy.md, "Crashes and restarts", has the trade-off.
    broker_session_timeout: float = Field(8.0, ge=1, le=90)
    broker_heartbeat_interval: float = Field(1.0, gt=0, le=30)
    broker_rebalance_timeout: float = Field(20.0, ge=1, le=600)

    # An input whose apply fails the same "database unavailable" way this many times in a row
    # while PostgreSQL answers a probe is dead-lettered with that reason (0 = retry forever).
    input_same_failure_attempts: int = Field(5, ge=0, le=1_000)

    # A partition with lag that made no progress for this long makes /health not ready.
    stream_stall_seconds: float = Field(120.0, gt=0)

    # Run the isolated timers (calendar dispatch) and the outbox relay in a child process of
    # the worker, on their own event loop and core (streams/timer_process); false = all in
    # the worker's own process.
    worker_timer_process: bool = True
    # The timer process reports progress (a heartbeat) several times within this; silent this
    # long (stopped, deadlocked) it makes /health not ready, and silent for
    # worker_timer_process_kill_seconds it is killed and started again.
    worker_timer_process_stall_seconds: float = Field(30.0, gt=0, le=3600)
    worker_timer_process_kill_seconds: float = Field(120.0, gt=0, le=7200)

    # Transactional outbox relay.
    outbox_batch_size: int = Field(500, ge=1, le=10_000)
    outbox_poll_interval_seconds: float = Field(1.0, gt=0)
    # After this a relay pass's unacknowledged sends are in doubt: it keeps waiting for them
    # (keeping its session alive at this interval; at most half of
    # DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS, checked when the relay is configured), up to
    # OUTBOX_IN_DOUBT_TIMEOUT_SECONDS in all; then it rolls back and aborts its producer.
    outbox_publish_timeout_seconds: float = Field(10.0, gt=0, le=600)
    outbox_in_doubt_timeout_seconds: float = Field(120.0, gt=0, le=3600)
    # Most of the 64 lanes one relay pass locks (what a paused relay can hold up).
    outbox_max_lanes_per_pass: int = Field(16, ge=1, le=64)
    # The relay producer's max_request_size: the largest record it sends. Topics the service
    # creates get max.message.bytes = this; the relay checks its topics' limit at start.
    outbox_max_record_bytes: int = Field(1_048_576, ge=1024, le=100 * 1024 * 1024)
    # A row whose topic is unknown (or not authorized) this long, while Kafka answers for
    # other topics, is parked (python -m streams outbox parked|retry|drop).
    outbox_park_unknown_topic_after_seconds: float = Field(60.0, gt=0, le=86_400)
    outbox_retention_hours: float = Field(24.0, ge=0, le=100 * 8760)
    # Retention (streams/maintenance, docs/architecture.md "Retention"; the horizons below are
    # the core's, not their slices': one job applies them all): rows per DELETE (each
    # its own transaction) and how long one run of a retention job may keep deleting.
    retention_batch_size: int = Field(5_000, ge=1, le=100_000)
    retention_budget_seconds: float = Field(240.0, gt=0, le=3_000)
    # Calendar events (with their reminders) this long past their start, none Pending, are
    # deleted; each leaves a tombstone (EventId, Version) for calendar_tombstone_retention_days,
    # then only the prune horizon (inputs that happened before it are stale).
    calendar_event_retention_days: float = Field(30.0, ge=1, le=36_500)
    calendar_tombstone_retention_days: float = Field(400.0, ge=1, le=36_500)
    # Completed (dated triggers only: their record stays in automation.scheduler_history),
    # Deactivated and system-Cancelled automation.scheduler rows this long past their
    # ScheduledOn and last change (an operator's cancel is kept).
    automation_scheduler_retention_days: float = Field(30.0, ge=2, le=36_500)
    timer_slot_retention_days: float = Field(7.0, ge=1, le=36_500)

    @field_validator("web_admin_token", "web_read_token")
    @classmethod
    def _admin_token(cls, v: SecretStr) -> SecretStr:
        token = v.get_secret_value()
        if token and (len(token) < WEB_ADMIN_TOKEN_MIN_CHARS or token != token.strip()):
            # The message never carries the value.
            raise ValueError(
                f"must be empty (off) or at least {WEB_ADMIN_TOKEN_MIN_CHARS} "
                "characters without surrounding spaces (e.g. `openssl rand -hex 32`)"
            )
        return v

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, v: str) -> str:
        if not v.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a postgresql:// URL")
        return v

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap_servers(cls, v: str) -> str:
        for entry in (e.strip() for e in v.split(",")):
            host, sep, port = entry.rpartition(":")
            if not entry or (sep and (not host or not port.isdigit() or not 0 < int(port) < 65536)):
                raise ValueError(f"must be host:port[,host:port], got {entry!r}")
        return v

    @field_validator("kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile", mode="before")
    @classmethod
    def _pem_file(cls, v: object) -> object:
        if v in (None, ""):
            return None
        path = Path(str(v))
        if not path.is_file():
            raise ValueError(f"no such file: {path}")
        return path

    @model_validator(mode="after")
    def _kafka_client(self) -> Settings:
        protocol = self.kafka_security_protocol
        if protocol.startswith("SASL_") and not (
            self.kafka_sasl_username and self.kafka_sasl_password.get_secret_value()
        ):
            raise ValueError(
                f"KAFKA_SECURITY_PROTOCOL={protocol} needs KAFKA_SASL_USERNAME and"
                " KAFKA_SASL_PASSWORD"
            )
        if (self.kafka_ssl_certfile is None) != (self.kafka_ssl_keyfile is None):
            raise ValueError("KAFKA_SSL_CERTFILE and KAFKA_SSL_KEYFILE go together")
        uses_tls = protocol in {"SSL", "SASL_SSL"}
        if not uses_tls and (self.kafka_ssl_cafile or self.kafka_ssl_certfile):
            raise ValueError(
                f"KAFKA_SSL_* files are set but KAFKA_SECURITY_PROTOCOL={protocol} does not use TLS"
            )
        if self.kafka_min_insync_replicas > self.kafka_replication_factor:
            raise ValueError(
                f"KAFKA_MIN_INSYNC_REPLICAS={self.kafka_min_insync_replicas} exceeds"
                f" KAFKA_REPLICATION_FACTOR={self.kafka_replication_factor}"
            )
        return self

    @model_validator(mode="after")
    def _group_timeouts(self) -> Settings:
        # Kafka's rule: heartbeats well within the session, so one lost heartbeat does not
        # end it.
        if self.broker_heartbeat_interval * 3 > self.broker_session_timeout:
            raise ValueError(
                f"BROKER_HEARTBEAT_INTERVAL={self.broker_heartbeat_interval:g} must be at most a"
                f" third of BROKER_SESSION_TIMEOUT={self.broker_session_timeout:g}"
            )
        return self

    @model_validator(mode="after")
    def _distinct_tokens(self) -> Settings:
        read = self.web_read_token.get_secret_value()
        if read and read == self.web_admin_token.get_secret_value():
            # One token for both would let every reader act: the values are never printed.
            raise ValueError("WEB_READ_TOKEN must differ from WEB_ADMIN_TOKEN")
        return self

    @field_validator("log_levels")
    @classmethod
    def _levels(cls, v: str) -> str:
        return ",".join(f"{k}={lv}" for k, lv in logs.parse_levels(v).items())

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        if v.lower() not in {"debug", "info", "warning", "error"}:
            raise ValueError("must be one of debug, info, warning, error")
        return v.lower()

    def __init__(self, **values: Any) -> None:
        super().__init__(**values)
        self._overrides = dict(values)
        # A slice's setting given here is validated here, as the core's are.
        given = values.keys() - type(self).model_fields.keys()
        if given:
            for cls in slice_settings_classes():
                if given & cls.model_fields.keys():
                    self.of(cls)

    def of(self, cls: type[S]) -> S:
        """A slice's settings (e.g. ``settings.of(AutomationSettings)``): from the same
        environment and the keyword arguments this instance was built with; built once."""
        found = self._slices.get(cls)
        if found is None:
            found = self._slices[cls] = cls(**self._overrides)
        assert isinstance(found, cls)
        return found

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """pydantic's copy (``update`` is not validated); a slice's setting in ``update``
        applies to its class through ``of``."""
        changes = dict(update or {})
        fields = type(self).model_fields
        copied = super().model_copy(
            update={k: v for k, v in changes.items() if k in fields}, deep=deep
        )
        copied._overrides = {**self._overrides, **changes}
        copied._slices = {
            cls: part.model_copy(
                update={k: v for k, v in changes.items() if k in cls.model_fields}, deep=deep
            )
            for cls, part in self._slices.items()
        }
        return copied

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"


def slice_settings_classes() -> list[type[BaseSettings]]:
    """Every slice's settings class (imported on first use: the slices import this module)."""
    from streams.slices import settings_classes

    return settings_classes()


def all_fields() -> dict[str, FieldInfo]:
    """Every setting the service reads, the core's and every slice's: field name → field."""
    fields: dict[str, FieldInfo] = dict(Settings.model_fields)
    for cls in slice_settings_classes():
        fields.update(cls.model_fields)
    return fields


def _problems(exc: ValidationError) -> list[str]:
    return [
        f"setting {'.'.join(str(p) for p in err['loc']).upper()}: {err['msg']}"
        if err["loc"]
        else str(err["msg"]).removeprefix("Value error, ")
        for err in exc.errors()
    ]


# Variables faust-streaming reads from the environment itself, which the service must not
# run with: static group membership (KIP-345), which the service is not built or tested for.
# Tried with faust-streaming 0.15.3 and two workers, twice: in one try neither worker was
# assigned any partition of the tables' changelogs or of Faust's leader topic, and the one
# killed and restarted got that assignment back as it was (a static member's rejoin starts
# no rebalance that would mend it), so the per-owner caches could not be recovered.
REFUSED_FAUST_ENV = {
    "CONSUMER_GROUP_INSTANCE_ID": "static group membership is not supported: with it "
    "faust-streaming has left a worker without its tables' changelog partitions, and a "
    "restarted static member gets such an assignment back without a rebalance; unset it (a "
    "worker restarted after a crash gets its partitions back once the broker session "
    "timeout, BROKER_SESSION_TIMEOUT, has passed)",
}


def faust_env_problems(env: Mapping[str, str]) -> list[str]:
    """The Faust environment variables set that the service refuses, each with why."""
    return [f"setting {name}: {why}" for name, why in REFUSED_FAUST_ENV.items() if env.get(name)]


def load_settings() -> Settings:
    """Read the core's and every slice's settings from the environment, turning validation
    errors (all of them, the core's first) into one ConfigError."""
    problems: list[str] = []
    settings: Settings | None = None
    try:
        settings = Settings()
    except ValidationError as exc:
        problems.extend(_problems(exc))
    for cls in slice_settings_classes():
        try:
            if settings is None:
                cls()
            else:
                settings.of(cls)
        except ValidationError as exc:
            problems.extend(_problems(exc))
    # Tracing's OTEL_* variables (streams/tracing/config.py): checked with the rest.
    from streams.tracing.config import problems as tracing_problems

    problems.extend(tracing_problems(os.environ))
    problems.extend(faust_env_problems(os.environ))
    if problems or settings is None:
        raise ConfigError(f"invalid configuration: {'; '.join(problems)}")
    return settings


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
