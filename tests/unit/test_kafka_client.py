"""Kafka client settings: validated at startup, built once, secrets kept out of reprs."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from faust.auth import SASLCredentials, SSLCredentials

from streams.kafka_client import client_options, faust_credentials, topic_config
from streams.settings import ConfigError, Settings, load_settings

CA = Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")


def test_plaintext_is_the_default_and_has_no_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP", raising=False)  # the Makefile exports the stack's
    s = Settings()
    assert client_options(s) == {
        "bootstrap_servers": "127.0.0.1:19092",
        "security_protocol": "PLAINTEXT",
    }
    assert faust_credentials(s) is None
    assert topic_config(s) == {"min.insync.replicas": "1"}
    # A DLQ keeps its records 7 days by default, whatever the broker's retention.
    assert topic_config(s, "p.pin.calendar.events.v1.dlq") == {
        "min.insync.replicas": "1",
        "retention.ms": str(7 * 24 * 3_600_000),
    }
    assert topic_config(Settings(kafka_dlq_retention_hours=720), "x.dlq")["retention.ms"] == str(
        30 * 24 * 3_600_000
    )


def test_sasl_ssl_builds_one_context_and_the_scram_login() -> None:
    s = Settings(
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="svc",
        kafka_sasl_password="s3cret-value",
        kafka_ssl_cafile=str(CA),
    )
    options = client_options(s)
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == (
        "svc",
        "s3cret-value",
    )
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    credentials = faust_credentials(s)
    assert isinstance(credentials, SASLCredentials)
    assert credentials.protocol.value == "SASL_SSL"
    assert credentials.mechanism.value == "SCRAM-SHA-512"
    assert "s3cret-value" not in repr(credentials) + repr(s)


def test_ssl_alone_gives_faust_tls_credentials() -> None:
    s = Settings(kafka_security_protocol="SSL", kafka_ssl_cafile=str(CA))
    assert isinstance(faust_credentials(s), SSLCredentials)
    assert "sasl_mechanism" not in client_options(s)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD"),
        ({"KAFKA_SECURITY_PROTOCOL": "TLS"}, "KAFKA_SECURITY_PROTOCOL"),
        ({"KAFKA_SASL_MECHANISM": "GSSAPI"}, "KAFKA_SASL_MECHANISM"),
        (
            {"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CAFILE": "/no/such.pem"},
            "KAFKA_SSL_CAFILE",
        ),
        ({"KAFKA_SSL_CAFILE": str(CA)}, "does not use TLS"),
        (
            {"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CERTFILE": str(CA)},
            "KAFKA_SSL_CERTFILE and KAFKA_SSL_KEYFILE",
        ),
        ({"KAFKA_REPLICATION_FACTOR": "0"}, "KAFKA_REPLICATION_FACTOR"),
        (
            {"KAFKA_REPLICATION_FACTOR": "2", "KAFKA_MIN_INSYNC_REPLICAS": "3"},
            "KAFKA_MIN_INSYNC_REPLICAS=3 exceeds KAFKA_REPLICATION_FACTOR=2",
        ),
    ],
)
def test_bad_kafka_settings_stop_startup_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError, match=named):
        load_settings()


def test_a_password_never_appears_in_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "leak-me-not")
    monkeypatch.setenv("KAFKA_SSL_CAFILE", "/no/such.pem")
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert "leak-me-not" not in str(raised.value)


def test_static_group_membership_stops_startup_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # faust-streaming reads it itself; with it a worker is assigned no changelog partitions.
    monkeypatch.setenv("CONSUMER_GROUP_INSTANCE_ID", "reminders-0")
    with pytest.raises(ConfigError, match="CONSUMER_GROUP_INSTANCE_ID: static group membership"):
        load_settings()
    monkeypatch.setenv("CONSUMER_GROUP_INSTANCE_ID", "")
    assert load_settings().app_id


def test_group_timeouts_are_validated_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BROKER_SESSION_TIMEOUT", "6")
    monkeypatch.setenv("BROKER_HEARTBEAT_INTERVAL", "3")
    with pytest.raises(ConfigError, match="BROKER_HEARTBEAT_INTERVAL=3 must be at most a third"):
        load_settings()
    monkeypatch.setenv("BROKER_SESSION_TIMEOUT", "0.5")
    with pytest.raises(ConfigError, match="BROKER_SESSION_TIMEOUT"):
        load_settings()
    monkeypatch.setenv("BROKER_SESSION_TIMEOUT", "9")
    settings = load_settings()
    assert (settings.broker_session_timeout, settings.broker_heartbeat_interval) == (9.0, 3.0)


def test_the_worker_joins_its_group_with_the_validated_timeouts(tmp_path: Path) -> None:
    from streams.app import create_context

    settings = Settings(
        worker_data_dir=tmp_path,
        broker_session_timeout=7,
        broker_heartbeat_interval=2,
        broker_rebalance_timeout=15,
    )
    conf = create_context(settings).app.conf
    assert conf.broker_session_timeout == 7.0
    assert conf.broker_heartbeat_interval == 2.0
    assert conf.broker_rebalance_timeout == 15.0
