"""The compose override files give docker-compose the local stack's shapes: SASL_SSL Kafka,
three brokers, the fast PostgreSQL, Prometheus and Grafana provisioned from the repository. Each merges with docker-compose.yml (``config`` needs no
engine) and gives the worker the client settings of its shape; the certificate script works."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from devkit.tools import tool

ROOT = Path(__file__).resolve().parents[2]
OVERRIDES = ROOT / "deploy" / "compose"


def merged(override: str) -> str:
    out = subprocess.run(
        [
            tool("docker-compose"),
            "-f",
            str(ROOT / "docker-compose.yml"),
            "-f",
            str(OVERRIDES / override),
            "config",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.parametrize(
    ("override", "wanted"),
    [
        (
            "sasl-ssl.yml",
            [
                "KAFKA_SECURITY_PROTOCOL: SASL_SSL",
                "KAFKA_SASL_MECHANISM: SCRAM-SHA-512",
                "KAFKA_SSL_CAFILE: /tls/ca.pem",
                "KAFKA_BOOTSTRAP: kafka:9094",
                "HOST:SASL_SSL",
            ],
        ),
        (
            "three-brokers.yml",
            [
                "KAFKA_REPLICATION_FACTOR: '3'",
                "KAFKA_MIN_INSYNC_REPLICAS: '2'",
                "1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093",
                "KAFKA_BOOTSTRAP: kafka:9092,kafka-2:9092,kafka-3:9092",
            ],
        ),
        ("fast-pg.yml", ["fsync=off", "synchronous_commit=off"]),
    ],
)
def test_an_override_merges_and_gives_its_shape(override: str, wanted: list[str]) -> None:
    text = merged(override)
    missing = [w for w in wanted if w not in text]
    assert not missing, missing
    # Published ports stay on loopback (WEB_BIND defaults to it).
    for line in text.splitlines():
        if line.strip().startswith("host_ip:"):
            assert line.split(":", 1)[1].strip() == "127.0.0.1", line


def test_the_certificate_script_makes_a_ca_and_a_broker_certificate_it_signed(
    tmp_path: Path,
) -> None:
    keytool = shutil.which("keytool")
    assert keytool, "keytool (Java 17, which the local Kafka needs) is not installed"
    done = subprocess.run(
        ["sh", str(OVERRIDES / "certs.sh")],
        env={"TLS_DIR": str(tmp_path), "PATH": str(Path(keytool).parent) + ":/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tmp_path / "ca.pem"), str(tmp_path / "broker.pem")],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    text = subprocess.run(
        [
            "openssl",
            "x509",
            "-in",
            str(tmp_path / "broker.pem"),
            "-noout",
            "-ext",
            "subjectAltName",
        ],
        capture_output=True,
        text=True,
    ).stdout
    assert "DNS:kafka" in text and "IP Address:127.0.0.1" in text
