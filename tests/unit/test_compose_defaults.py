"""docker-compose.yml stays safe by default: loopback ports, restart policies, health checks.

Read as text (the project has no YAML dependency); `docker compose config` validates the
schema where Docker is installed.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = (ROOT / "docker-compose.yml").read_text()


def services() -> dict[str, str]:
    """Each top-level service's block of text, by name."""
    body = COMPOSE.split("\nservices:\n", 1)[1].split("\nvolumes:\n", 1)[0]
    parts = re.split(r"^  ([a-z][a-z0-9_-]*):\n", body, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_stack_is_kafka_postgres_a_worker_prometheus_and_grafana() -> None:
    assert set(services()) == {"kafka", "postgres", "worker", "prometheus", "grafana"}
    assert "image: apache/kafka:4.4.0" in services()["kafka"]


def test_plain_compose_up_provisions_prometheus_and_grafana_from_the_repository() -> None:
    """Alerts loaded, the worker scraped as the rules' job, every dashboard and the datasource
    provisioned: the dashboards show without clicking."""
    s = services()
    assert "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in s["prometheus"]
    assert "./deploy/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in s["prometheus"]
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in s["grafana"]
    assert "./deploy/grafana:/var/lib/grafana/dashboards:ro" in s["grafana"]
    assert 'GF_AUTH_ANONYMOUS_ENABLED: "true"' in s["grafana"]
    scrape = (ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text()
    assert 'targets: ["worker:6066"]' in scrape and "job_name: reminders-stream" in scrape


def test_every_published_port_is_on_loopback_unless_web_bind_opts_in() -> None:
    published = re.findall(r"^\s+ports: \[(.*)\]$", COMPOSE, flags=re.M)
    entries = [e.strip().strip('"') for line in published for e in line.split(",")]
    assert sorted(entries) == [
        "${WEB_BIND:-127.0.0.1}:6066:6066",
        "127.0.0.1:19092:19092",
        "127.0.0.1:3000:3000",
        "127.0.0.1:55432:5432",
        "127.0.0.1:9090:9090",
    ]


def test_restart_policies_and_health_checks_for_every_service() -> None:
    s = services()
    assert "restart: unless-stopped" in s["kafka"] and "restart: unless-stopped" in s["postgres"]
    assert "restart: on-failure" in s["worker"]
    assert (
        "restart: unless-stopped" in s["prometheus"] and "restart: unless-stopped" in s["grafana"]
    )
    for name, block in s.items():
        assert "healthcheck:" in block, name
    assert "/health/live" in s["worker"]
    assert "condition: service_healthy" in s["worker"]


def test_the_worker_keeps_dlq_records_at_least_seven_days_by_default() -> None:
    found = re.search(r"KAFKA_DLQ_RETENTION_HOURS: \$\{KAFKA_DLQ_RETENTION_HOURS:-(\d+)\}", COMPOSE)
    assert found is not None and int(found.group(1)) >= 7 * 24
    assert "python -m streams topics" in services()["worker"]  # which applies it


def test_docker_compose_config_parses_without_a_daemon() -> None:
    """Debian's docker-compose validates the file (schema, interpolation) with no engine."""
    import subprocess

    from devkit.tools import tool

    out = subprocess.run(
        [tool("docker-compose"), "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_images_and_ports_match_the_local_stack_and_the_readme() -> None:
    makefile = (ROOT / "Makefile").read_text()
    pom = (ROOT / "stack" / "kafka" / "pom.xml").read_text()
    kafka_version = re.search(r"<kafka.version>(.*)</kafka.version>", pom)
    assert kafka_version is not None
    assert f"image: apache/kafka:{kafka_version.group(1)}" in services()["kafka"]
    kafka_port = re.search(r"KAFKA_PORT \?= (\d+)", makefile)
    pg_port = re.search(r"PG_PORT \?= (\d+)", makefile)
    assert kafka_port and pg_port
    assert f"127.0.0.1:{kafka_port.group(1)}:19092" in COMPOSE
    assert f"127.0.0.1:{pg_port.group(1)}:5432" in COMPOSE
    readme = (ROOT / "README.md").read_text()
    assert f"Kafka {kafka_version.group(1)}" in readme
    assert "6066" in readme and "6066:6066" in COMPOSE


def test_the_workers_overridable_settings_default_to_the_codes() -> None:
    from streams.settings import all_fields

    fields = all_fields()
    found = re.findall(r"^\s+([A-Z_]+): \$\{\1:-([^}]*)\}$", services()["worker"], flags=re.M)
    names = {name for name, _ in found}
    assert {"DB_MAX_CONNECTIONS_PER_WORKER", "OUTBOX_IN_DOUBT_TIMEOUT_SECONDS"} <= names
    assert {"RETENTION_BATCH_SIZE", "RETENTION_BUDGET_SECONDS"} <= names
    for name, default in found:
        code = fields[name.lower()].default
        if not isinstance(code, int | float):  # e.g. WEB_ADMIN_TOKEN: empty, the actions off
            value = code.get_secret_value() if hasattr(code, "get_secret_value") else code
            assert default == ("" if value is None else str(value)), name
        else:
            assert float(default) == float(code), name
