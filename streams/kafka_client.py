"""How every Kafka client of the service connects: bootstrap servers, TLS and SASL, built once
from the settings (the Faust app, the outbox producer, admin, DLQ publish and replay, the gap
reader, the owner-work producer, the demo and dev tools).

Secrets stay in ``SecretStr`` until a client is built; nothing here logs them.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any

from streams.contracts import DLQ_SUFFIX
from streams.settings import Settings

if TYPE_CHECKING:
    from faust.types.auth import CredentialsT


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context for SSL and SASL_SSL (None for the plaintext protocols): the brokers'
    certificates are verified against KAFKA_SSL_CAFILE (or the system's CAs), host names
    included; a client certificate is presented when one is configured."""
    if settings.kafka_security_protocol not in {"SSL", "SASL_SSL"}:
        return None
    cafile = settings.kafka_ssl_cafile
    context = ssl.create_default_context(
        ssl.Purpose.SERVER_AUTH, cafile=str(cafile) if cafile else None
    )
    if settings.kafka_ssl_certfile is not None and settings.kafka_ssl_keyfile is not None:
        context.load_cert_chain(
            str(settings.kafka_ssl_certfile),
            str(settings.kafka_ssl_keyfile),
            password=settings.kafka_ssl_key_password.get_secret_value() or None,
        )
    return context


def security_options(settings: Settings) -> dict[str, Any]:
    """aiokafka's security keyword arguments for any client (producer, consumer, admin)."""
    protocol = settings.kafka_security_protocol
    options: dict[str, Any] = {"security_protocol": protocol}
    context = ssl_context(settings)
    if context is not None:
        options["ssl_context"] = context
    if protocol.startswith("SASL_"):
        options["sasl_mechanism"] = settings.kafka_sasl_mechanism
        options["sasl_plain_username"] = settings.kafka_sasl_username
        options["sasl_plain_password"] = settings.kafka_sasl_password.get_secret_value()
    return options


def client_options(settings: Settings) -> dict[str, Any]:
    """``bootstrap_servers`` plus the security options: ``AIOKafkaProducer(**client_options(s))``."""
    return {"bootstrap_servers": settings.kafka_bootstrap, **security_options(settings)}


def faust_credentials(settings: Settings) -> CredentialsT | None:
    """The Faust app's ``broker_credentials`` (None for PLAINTEXT)."""
    # Faust only here: the timer process builds its Kafka clients without it.
    from faust.auth import SASLCredentials, SSLCredentials

    protocol = settings.kafka_security_protocol
    context = ssl_context(settings)
    if protocol.startswith("SASL_"):
        return SASLCredentials(
            username=settings.kafka_sasl_username,
            password=settings.kafka_sasl_password.get_secret_value(),
            ssl_context=context,
            mechanism=settings.kafka_sasl_mechanism,
        )
    if context is not None:
        return SSLCredentials(context)
    return None


def topic_config(settings: Settings, name: str = "") -> dict[str, str]:
    """Topic-level configuration for the topic ``name`` the service creates: a DLQ keeps its
    records KAFKA_DLQ_RETENTION_HOURS, whatever the broker's default retention."""
    config = {"min.insync.replicas": str(settings.kafka_min_insync_replicas)}
    if name.endswith(DLQ_SUFFIX):
        config["retention.ms"] = str(int(settings.kafka_dlq_retention_hours * 3_600_000))
    return config
