"""The relay's settings (validated), the result of one pass, and its errors."""

from __future__ import annotations

from dataclasses import dataclass

from db.outbox import LANES
from streams.contracts import RECORD_OVERHEAD_BYTES, produced_contracts
from streams.settings import ConfigError, Settings

DEFAULT_MAX_LANES_PER_PASS = 16


@dataclass(frozen=True, slots=True)
class RelayConfig:
    batch_size: int = 500
    """Most rows per pass (one transaction), spread over the lanes that have work."""
    poll_interval: float = 1.0
    """Seconds between passes when no NOTIFY arrives."""
    max_lanes_per_pass: int = DEFAULT_MAX_LANES_PER_PASS
    """Most lanes one pass locks. A relay paused in the middle of a pass (a stopped process,
    a long GC, a hung host) holds at most this many of the 64 lanes; other relays keep
    publishing the rest. Fewer lanes per pass also let several relays share the work."""
    metrics_interval: float = 1.0
    """Backlog and oldest-age gauges are refreshed at most this often."""
    listener_check_interval: float = 30.0
    """How often the LISTEN connection is pinged to notice a silently dropped socket."""
    max_backoff: float = 30.0
    """Ceiling of the retry delay after failed passes and of a failing lane's cool-down."""
    probe_interval: float = 1.0
    """While the LISTEN connection is down it tries to reconnect this often (jittered), and
    its reconnect ends a backoff after failed passes at once: the relay resumes within about
    this long of the database's return, however long the outage and its backoff grew."""
    stop_timeout: float = 30.0
    """``stop()`` waits this long for the current pass, then cancels (rolls it back)."""
    publish_timeout: float = 10.0
    """How long a pass waits for Kafka (topic metadata, sends, acknowledgements) before its
    sends count as in doubt; it then goes on waiting (see ``in_doubt_timeout``) and keeps
    its session alive every ``publish_timeout``, so keep it well below PostgreSQL's
    idle_in_transaction_session_timeout. Also bounds starting a producer."""
    in_doubt_timeout: float = 120.0
    """Longest a pass waits in all for the acknowledgements of sends it made (an idempotent
    producer retries them until their partition has a leader again: a broker failover takes
    a broker session timeout and an election). Sending those rows again sooner would
    publish them twice. Past it the pass rolls back, its producer is aborted (what it still
    holds is never delivered) and the rows go out again: only a request already on the
    wire can then be written twice, with the same ``outbox-id``."""
    producer_stop_timeout: float = 5.0
    """How long the relay waits for a replaced producer to stop. One whose broker does not
    answer cannot stop (aiokafka flushes first): it goes on stopping in the background, and
    ``close()`` gives up on it after this long again."""

    park_topic_wait: float = 60.0
    """How long a row whose topic Kafka does not know (or does not let us write) is retried
    before it is parked, counted only while Kafka answers for other topics
    (streams/outbox/parking.py). Rows refused as too large are parked on their probe."""
    max_record_bytes: int = 1_048_576
    """The producer's ``max_request_size``: a record larger than this is refused by the
    producer itself (and parked). Must not exceed the topics' ``max.message.bytes``."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError("RelayConfig.batch_size must be >= 1")
        if not 1 <= self.max_lanes_per_pass <= LANES:
            raise ValueError(f"RelayConfig.max_lanes_per_pass must be in 1..{LANES}")
        for name in (
            "poll_interval",
            "metrics_interval",
            "listener_check_interval",
            "max_backoff",
            "probe_interval",
            "stop_timeout",
            "publish_timeout",
            "in_doubt_timeout",
            "producer_stop_timeout",
            "park_topic_wait",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"RelayConfig.{name} must be > 0")
        if self.max_record_bytes < 1024:
            raise ValueError("RelayConfig.max_record_bytes must be >= 1024")
        if self.in_doubt_timeout < self.publish_timeout:
            raise ValueError("RelayConfig.in_doubt_timeout must be >= publish_timeout")

    @classmethod
    def from_settings(cls, settings: Settings) -> RelayConfig:
        if settings.outbox_in_doubt_timeout_seconds < settings.outbox_publish_timeout_seconds:
            raise ConfigError(
                "invalid configuration: setting OUTBOX_IN_DOUBT_TIMEOUT_SECONDS "
                f"({settings.outbox_in_doubt_timeout_seconds:g}) must be at least "
                f"OUTBOX_PUBLISH_TIMEOUT_SECONDS ({settings.outbox_publish_timeout_seconds:g})"
            )
        check_contract_sizes(settings.outbox_max_record_bytes)
        config = cls(
            batch_size=settings.outbox_batch_size,
            poll_interval=settings.outbox_poll_interval_seconds,
            metrics_interval=settings.outbox_poll_interval_seconds,
            max_lanes_per_pass=settings.outbox_max_lanes_per_pass,
            publish_timeout=settings.outbox_publish_timeout_seconds,
            in_doubt_timeout=settings.outbox_in_doubt_timeout_seconds,
            park_topic_wait=settings.outbox_park_unknown_topic_after_seconds,
            max_record_bytes=settings.outbox_max_record_bytes,
        )
        # A pass is idle in its transaction between keepalives (one per publish timeout) while
        # it waits for Kafka; PostgreSQL must not end the session first (the pass would fail
        # instead of waiting for its sends), so the publish timeout has to be clearly shorter.
        idle = settings.db_idle_in_transaction_timeout_seconds
        if config.publish_timeout > idle / 2:
            raise ConfigError(
                "invalid configuration: setting OUTBOX_PUBLISH_TIMEOUT_SECONDS "
                f"({config.publish_timeout:g}) must be at most half of "
                f"DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS ({idle:g}): a relay pass waits "
                "for Kafka inside its transaction"
            )
        return config


def check_contract_sizes(max_record_bytes: int) -> None:
    """Every produced contract's largest message, with its key and headers, must fit the
    relay producer's limit, or such a message would be refused (and parked) by design."""
    for contract in produced_contracts():
        needed = contract.max_payload_bytes + RECORD_OVERHEAD_BYTES
        if needed > max_record_bytes:
            raise ConfigError(
                "invalid configuration: setting OUTBOX_MAX_RECORD_BYTES "
                f"({max_record_bytes}) is below what contract {contract.name} may produce "
                f"(max_payload_bytes {contract.max_payload_bytes} + {RECORD_OVERHEAD_BYTES} "
                "for key, headers and framing)"
            )


@dataclass(frozen=True, slots=True)
class RelayResult:
    lanes: int
    """Lanes this pass locked."""
    published: int
    """Rows acknowledged by Kafka and marked published."""
    failed: int
    """Rows left unpublished because Kafka refused a row at or before them in their lane,
    or because the producer failed."""
    more: bool
    """Some lane may hold more rows: run another pass without waiting."""
    producer_replaced: bool = False
    """The producer failed during this pass and was replaced: the loop backs off."""
    parked: int = 0
    """Of the failed rows, those Kafka refused for good: moved to ops.outbox_parked."""


class RelayNotOpen(RuntimeError):
    pass


class PublishTimeout(RuntimeError):
    """Kafka did not acknowledge a pass's rows within ``in_doubt_timeout``: the pass rolled
    back and released its lanes, its producer was aborted; the rows stay unpublished."""
