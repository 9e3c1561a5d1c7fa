"""The Helm chart (deploy/helm/reminders-stream): ``helm lint`` and ``helm template`` with
several values, every rendered object validated against the Kubernetes schemas
(kubernetes-validate, strict: no unknown fields), and what the objects must say.

helm is the pinned version built by devkit.helm (``go install``, cached under .dev/): a
missing helm is installed here, and one that cannot be installed fails the test, never skips
it. The first build takes a few minutes (.ci/run builds it before the tests).
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from devkit.helm import HelmUnavailable, ensure_helm
from streams.outbox.config import RelayConfig
from streams.timer_process.supervisor import TimerProcess

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "reminders-stream"
# The oldest Kubernetes the chart declares (Chart.yaml kubeVersion) and the newest schemas.
KUBE_VERSIONS = ("1.25.0", "1.37.0")
# Custom resources: not in the Kubernetes schemas; checked field by field below.
CUSTOM_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
# A cluster with the Prometheus operator (its CRDs): --api-versions, as helm install sees them.
OPERATOR = ["monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule"]

SASL_SSL = [
    "kafka.securityProtocol=SASL_SSL",
    "kafka.saslUsername=reminders",
    "kafka.caSecret.name=kafka-ca",
    "secrets.existingSecret=reminders-prod",
]
THREE = [
    "replicas=3",
    "kafka.replicationFactor=3",
    "kafka.minInsyncReplicas=2",
    "persistence.enabled=false",
]
# What a platform team sets for a managed PostgreSQL (verify-full, a client certificate) and
# Kafka with mutual TLS, plus its own env, volumes, annotations and a chart-made Secret.
HARDENED = [
    "kafka.securityProtocol=SSL",
    "kafka.caSecret.name=kafka-ca",
    "kafka.clientCertSecret.name=kafka-client",
    "database.tls.sslmode=verify-full",
    "database.tls.caSecret.name=pg-ca",
    "database.tls.clientCertSecret.name=pg-client",
    "secrets.databaseUrl=postgresql://reminders@pg.example.internal:5432/reminders",
    "secrets.webReadToken=read-token-from-values",
    "extraEnv[0].name=OTEL_EXPORTER_OTLP_ENDPOINT",
    "extraEnv[0].value=http://otel:4317",
    "extraVolumes[0].name=extra",
    "extraVolumes[0].emptyDir.medium=Memory",
    "extraVolumeMounts[0].name=extra",
    "extraVolumeMounts[0].mountPath=/extra",
    "jobs.podAnnotations.sidecar\\.istio\\.io/inject=false",
    "prometheusRule.enabled=true",
]
VALUES = {"default": [], "sasl_ssl": SASL_SSL, "three": THREE, "hardened": HARDENED}

pytestmark = pytest.mark.timeout(900)  # the first helm build (go install) takes minutes


@pytest.fixture(scope="module")
def helm() -> Path:
    try:
        return ensure_helm()
    except HelmUnavailable as exc:
        pytest.fail(str(exc))


def run(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def render_text(
    helm: Path, sets: list[str], kube: str = KUBE_VERSIONS[0], apis: list[str] = OPERATOR
) -> str:
    args = ["template", "rel", str(CHART), "--namespace", "reminders", "--kube-version", kube]
    for s in sets:
        args += ["--set", s]
    for api in apis:
        args += ["--api-versions", api]
    out = run(helm, *args)
    assert out.returncode == 0, out.stderr
    return out.stdout


def render(
    helm: Path, sets: list[str], kube: str = KUBE_VERSIONS[0], apis: list[str] = OPERATOR
) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(render_text(helm, sets, kube, apis)) if doc]


def kinds(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects)


def one(objects: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, kinds(objects)
    return found[0]


def worker(objects: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = one(objects, "StatefulSet")["spec"]["template"]["spec"][
        "containers"
    ][0]
    return container


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def custom_resource_problems(obj: dict[str, Any]) -> list[str]:
    """The ServiceMonitor and PrometheusRule fields the Prometheus operator needs (its CRDs
    are not bundled)."""
    spec = obj.get("spec", {})
    problems = []
    if obj["kind"] == "PrometheusRule":
        groups = spec.get("groups") or []
        if not groups or not all(g.get("rules") for g in groups):
            problems.append("spec.groups without rules")
        return problems
    if not spec.get("selector", {}).get("matchLabels"):
        problems.append("spec.selector.matchLabels missing")
    for endpoint in spec.get("endpoints") or [{}]:
        if not endpoint.get("port") or not str(endpoint.get("path", "")).startswith("/"):
            problems.append(f"endpoint without port/path: {endpoint}")
    return problems


# -- lint, render, validate --------------------------------------------------------------------


@pytest.mark.parametrize("name", list(VALUES))
def test_helm_lint_passes(helm: Path, name: str) -> None:
    args = ["lint", str(CHART), "--strict", "--kube-version", KUBE_VERSIONS[0]]
    for s in VALUES[name]:
        args += ["--set", s]
    out = run(helm, *args)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("name", list(VALUES))
def test_every_rendered_object_is_valid_for_kubernetes(helm: Path, name: str, kube: str) -> None:
    objects = render(helm, VALUES[name], kube)
    assert len(objects) >= 7
    problems = []
    for obj in objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if (obj["apiVersion"], obj["kind"]) in CUSTOM_KINDS:
            problems += [f"{where}: {p}" for p in custom_resource_problems(obj)]
            continue
        try:
            kubernetes_validate.validate(obj, kube, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{where}: {exc.message} at {list(exc.path)}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            problems.append(f"{where}: no schema ({exc})")
    assert problems == []


def test_the_default_objects(helm: Path) -> None:
    on_operator = [
        "ConfigMap/rel-reminders-stream-dashboards",
        "Job/rel-reminders-stream-migrate",
        "Job/rel-reminders-stream-topics",
        "NetworkPolicy/rel-reminders-stream",
        "PodDisruptionBudget/rel-reminders-stream",
        "Service/rel-reminders-stream-workers",
        "ServiceAccount/rel-reminders-stream",
        "ServiceMonitor/rel-reminders-stream",
        "StatefulSet/rel-reminders-stream",
    ]
    assert kinds(render(helm, [])) == on_operator
    # A cluster without the Prometheus operator's CRDs: no ServiceMonitor to fail the install.
    without = [k for k in on_operator if not k.startswith("ServiceMonitor/")]
    assert kinds(render(helm, ["prometheusRule.enabled=true"], apis=[])) == without


def test_plain_helm_template_renders_without_a_kube_version(helm: Path) -> None:
    out = run(helm, "template", "rel", str(CHART))
    assert out.returncode == 0, out.stderr
    assert "kind: StatefulSet" in out.stdout


# -- what the objects say ----------------------------------------------------------------------


def test_workers_listen_on_every_interface_and_probe_live_and_ready(helm: Path) -> None:
    objects = render(helm, [])
    c = worker(objects)
    e = env(c)
    assert e["WEB_HOST"] == "0.0.0.0"  # the service's default 127.0.0.1 is unreachable for probes
    assert c["ports"] == [{"name": "web", "containerPort": 6066, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/health/live", "port": "web"}
    assert c["startupProbe"]["httpGet"] == {"path": "/health/live", "port": "web"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "web"}
    assert c["args"] == ["streams", "worker"]
    assert e["WORKER_DATA_DIR"] == "/data"
    assert e["WEB_ADVERTISED_URL"] == (
        "http://$(POD_NAME).rel-reminders-stream-workers.reminders.svc:6066"
    )
    sts = one(objects, "StatefulSet")
    assert sts["spec"]["serviceName"] == "rel-reminders-stream-workers"
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "data"
    assert {"name": "data", "mountPath": "/data"} in c["volumeMounts"]


def test_secrets_come_from_a_secret_never_from_plain_values(helm: Path) -> None:
    objects = render(helm, SASL_SSL)
    e = env(worker(objects))
    for key in ("DATABASE_URL", "KAFKA_SASL_PASSWORD"):
        assert e[key] == {"secretKeyRef": {"name": "reminders-prod", "key": key}}
    assert not [o for o in objects if o["kind"] == "Secret"]  # existingSecret: none rendered
    assert e["KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL" and e["KAFKA_SASL_USERNAME"] == "reminders"
    assert e["KAFKA_SSL_CAFILE"] == "/etc/reminders/kafka-ca/ca.crt"
    pod = one(objects, "StatefulSet")["spec"]["template"]["spec"]
    assert {"name": "kafka-ca", "mountPath": "/etc/reminders/kafka-ca", "readOnly": True} in (
        worker(objects)["volumeMounts"]
    )
    ca = next(v for v in pod["volumes"] if v["name"] == "kafka-ca")
    assert ca["secret"]["secretName"] == "kafka-ca"
    # The Jobs read the same settings (the CLI validates all of them at startup).
    for job in ("migrate", "topics"):
        spec = one(objects, "Job", job)["spec"]["template"]["spec"]
        assert env(spec["containers"][0]) == {
            k: v for k, v in e.items() if k in env(spec["containers"][0])
        }
        assert "KAFKA_SSL_CAFILE" in env(spec["containers"][0])
    # A chart-made Secret only from values it is given: an ordinary object (no hook), kept
    # across upgrades; the first install's Jobs then run after it exists (post-install).
    assert not [o for o in render(helm, []) if o["kind"] == "Secret"]  # no default password
    objects = render(helm, HARDENED)
    secret = one(objects, "Secret")
    assert set(secret["stringData"]) == {"DATABASE_URL", "KAFKA_SASL_PASSWORD", "WEB_READ_TOKEN"}
    assert "annotations" not in secret["metadata"]
    for job in ("migrate", "topics"):
        hook = one(objects, "Job", job)["metadata"]["annotations"]["helm.sh/hook"]
        assert hook == "post-install,pre-upgrade"


def test_the_console_token_comes_only_from_a_named_secret(helm: Path) -> None:
    assert "WEB_ADMIN_TOKEN" not in env(worker(render(helm, [])))  # actions off by default
    objects = render(helm, ["webAdminToken.existingSecret=reminders-console"])
    assert env(worker(objects))["WEB_ADMIN_TOKEN"] == {
        "secretKeyRef": {"name": "reminders-console", "key": "token"}
    }
    secrets = [o for o in objects if o["kind"] == "Secret"]
    assert all("WEB_ADMIN_TOKEN" not in o.get("stringData", {}) for o in secrets)


def test_plaintext_mounts_no_ca_and_sasl_without_a_user_is_refused(helm: Path) -> None:
    e = env(worker(render(helm, ["kafka.caSecret.name=kafka-ca"])))
    assert "KAFKA_SSL_CAFILE" not in e and "KAFKA_SASL_PASSWORD" not in e
    args = ["template", "rel", str(CHART), "--kube-version", KUBE_VERSIONS[0]]
    out = run(helm, *args, "--set", "kafka.securityProtocol=SASL_SSL")
    assert out.returncode != 0 and "kafka.saslUsername is required" in out.stderr


def test_three_replicas_on_empty_dirs_with_rf_3(helm: Path) -> None:
    objects = render(helm, THREE)
    sts = one(objects, "StatefulSet")
    assert sts["spec"]["replicas"] == 3 and "volumeClaimTemplates" not in sts["spec"]
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"] == {"name": "data", "emptyDir": {}}
    e = env(worker(objects))
    assert (e["KAFKA_REPLICATION_FACTOR"], e["KAFKA_MIN_INSYNC_REPLICAS"]) == ("3", "2")
    assert one(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_migrate_then_topics_run_as_hooks_before_the_workers(helm: Path) -> None:
    objects = render(helm, [])
    for name, weight in (("migrate", "0"), ("topics", "1")):
        job = one(objects, "Job", name)
        notes = job["metadata"]["annotations"]
        assert notes["helm.sh/hook"] == "pre-install,pre-upgrade"  # the operator's Secret
        assert notes["helm.sh/hook-weight"] == weight
        assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["streams", name]
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_service_monitor_scrapes_each_worker_and_dashboards_are_the_repos(helm: Path) -> None:
    objects = render(helm, [])
    monitor = one(objects, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "web"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    service = one(objects, "Service")
    assert service["spec"]["clusterIP"] == "None"
    assert monitor["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    dashboards = one(objects, "ConfigMap", "dashboards")["data"]
    files = sorted((ROOT / "deploy" / "grafana").glob("*.json"))
    assert sorted(dashboards) == [f.name for f in files] and files
    for f in files:
        assert json.loads(dashboards[f.name]) == json.loads(f.read_text())


def test_resources_follow_the_measured_worker() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    # docs/benchmarks.md: worker RSS after ingest 191-200 MB; worker + timer process about
    # one core at 1,000 due/s + 2,000 events/s.
    assert values["resources"]["requests"] == {"cpu": "1", "memory": "512Mi"}
    assert "cpu" not in values["resources"]["limits"]  # throttling would show as lateness
    assert values["resources"]["limits"]["memory"] == "1Gi"


# -- the stop sequence and the grace period ----------------------------------------------------


def stop_budget() -> dict[str, float]:
    """The bounded waits of a worker's stop (streams/app.py on_stop), read from the code."""
    app = (ROOT / "streams" / "app.py").read_text()
    registry = re.search(r"registry\.stop\(timeout=(\d+), cancel_grace=(\d+)\)", app)
    assert registry, "streams/app.py on_stop no longer calls registry.stop(timeout=, cancel_grace=)"
    relay_src = (ROOT / "streams" / "outbox" / "relay.py").read_text()
    listener = re.search(r"wait_for\(asyncio\.shield\(listener\), (\d+)\)", relay_src)
    assert listener
    config = RelayConfig()
    child = inspect.signature(TimerProcess.__init__).parameters["stop_timeout"].default
    return {
        "registry": float(registry.group(1)) + float(registry.group(2)),
        "timer_process": float(child),
        "relay_in_process": config.stop_timeout
        + float(listener.group(1))
        + config.producer_stop_timeout,
        # Cache flushes, Faust's consumer/producer stop (group leave, last commit), pool close.
        "unbounded_allowance": 20.0,
    }


def grace_seconds() -> float:
    b = stop_budget()
    # WORKER_TIMER_PROCESS=true: the timer process (relay inside); false: the relay here.
    slowest = max(b["timer_process"], b["relay_in_process"])
    return b["registry"] + slowest + b["unbounded_allowance"] + 10  # 10: margin


def test_termination_grace_fits_the_stop_sequence(helm: Path) -> None:
    assert stop_budget() == {
        "registry": 25.0,
        "timer_process": 30.0,
        "relay_in_process": 45.0,
        "unbounded_allowance": 20.0,
    }
    assert grace_seconds() == 100
    pod = one(render(helm, []), "StatefulSet")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == grace_seconds()


def test_compose_stop_grace_period_is_the_same_figure() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["services"]["worker"]["stop_grace_period"] == f"{grace_seconds():g}s"


def iter_env_names(objects: list[dict[str, Any]]) -> Iterator[str]:
    for o in objects:
        spec = o.get("spec", {}).get("template", {}).get("spec", {})
        for c in spec.get("containers", []):
            yield from (e["name"] for e in c.get("env", []))


def test_every_env_name_is_a_setting_or_documented(helm: Path) -> None:
    """A typo in the chart would be ignored by the settings (extra="ignore")."""
    from streams.settings import all_fields

    known = {name.upper() for name in all_fields()}
    # libpq's TLS variables, read by asyncpg itself; the extraEnv example of HARDENED.
    driver = {"PGSSLMODE", "PGSSLROOTCERT", "PGSSLCERT", "PGSSLKEY", "OTEL_EXPORTER_OTLP_ENDPOINT"}
    names = set(iter_env_names(render(helm, SASL_SSL))) | set(
        iter_env_names(render(helm, HARDENED))
    )
    assert names - known - driver - {"POD_NAME"} == set()


# What production tunes: the chart passes them, and its defaults are the code's.
PRODUCTION_SETTINGS = (
    "DB_MAX_CONNECTIONS_PER_WORKER",
    "KAFKA_DLQ_RETENTION_HOURS",
    "OUTBOX_PUBLISH_TIMEOUT_SECONDS",
    "OUTBOX_IN_DOUBT_TIMEOUT_SECONDS",
    "RETENTION_BATCH_SIZE",
    "RETENTION_BUDGET_SECONDS",
    "OUTBOX_RETENTION_HOURS",
    "CALENDAR_EVENT_RETENTION_DAYS",
    "CALENDAR_TOMBSTONE_RETENTION_DAYS",
    "AUTOMATION_SCHEDULER_RETENTION_DAYS",
    "TIMER_SLOT_RETENTION_DAYS",
)


def test_production_settings_are_passed_with_the_codes_defaults(helm: Path) -> None:
    from streams.settings import all_fields

    defaults = all_fields()
    objects = render(helm, [])
    for container in (
        worker(objects),
        *(
            one(objects, "Job", suffix)["spec"]["template"]["spec"]["containers"][0]
            for suffix in ("-migrate", "-topics")
        ),
    ):
        values = env(container)
        for name in PRODUCTION_SETTINGS:
            assert name in values, f"{container['name']}: {name} not passed"
            assert float(values[name]) == float(defaults[name.lower()].default), name


def test_the_prometheus_rule_links_runbooks_under_the_base_and_selects_the_job(
    helm: Path,
) -> None:
    base = "https://wiki.example.org/reminders/"
    sets = ["prometheusRule.enabled=true", f"prometheusRule.runbookBaseUrl={base}"]
    objects = render(helm, [*sets, "serviceMonitor.job=rs-prod"])
    rules = [r for g in one(objects, "PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    source = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    assert [r["alert"] for r in rules] == [r["alert"] for g in source["groups"] for r in g["rules"]]
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        assert url == base + rule["annotations"]["runbook"], rule["alert"]
        assert 'job="rs-prod"' in rule["expr"] and "reminders-stream" not in rule["expr"]
    endpoint = one(objects, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["relabelings"] == [{"targetLabel": "job", "replacement": "rs-prod"}]
    assert not [k for k in kinds(render(helm, [])) if k.startswith("PrometheusRule/")]


# -- what a platform team's cluster asks of it -------------------------------------------------


def pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        f"{o['kind']}/{o['metadata']['name']}": o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] in {"StatefulSet", "Job"}
    }


def test_pods_run_under_their_own_account_without_an_api_token(helm: Path) -> None:
    objects = render(helm, [])
    account = one(objects, "ServiceAccount")
    assert account["automountServiceAccountToken"] is False
    for where, pod in pod_specs(objects).items():
        assert pod["serviceAccountName"] == account["metadata"]["name"], where
        assert pod["automountServiceAccountToken"] is False, where
        assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch", where


def test_the_network_policy_lets_in_only_the_web_port_and_out_only_dns_kafka_postgres(
    helm: Path,
) -> None:
    policy = one(render(helm, []), "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "reminders-stream",
        "app.kubernetes.io/instance": "rel",
    }
    [ingress] = policy["ingress"]
    assert ingress["ports"] == [{"port": 6066, "protocol": "TCP"}]
    assert {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    } in (ingress["from"])
    egress_ports = sorted(p["port"] for rule in policy["egress"] for p in rule["ports"])
    assert egress_ports == [53, 53, 5432, 9092, 9093]
    custom = one(
        render(helm, ["networkPolicy.ingressFrom[0].podSelector.matchLabels.role=scraper"]),
        "NetworkPolicy",
    )["spec"]["ingress"][0]["from"]
    assert {"podSelector": {"matchLabels": {"role": "scraper"}}} in custom
    assert not [
        o for o in render(helm, ["networkPolicy.enabled=false"]) if o["kind"] == "NetworkPolicy"
    ]


def test_managed_postgres_over_verify_full_and_kafka_with_mutual_tls(helm: Path) -> None:
    objects = render(helm, HARDENED)
    for where, pod in pod_specs(objects).items():
        container = pod["containers"][0]
        e = env(container)
        assert e["PGSSLMODE"] == "verify-full", where
        assert e["PGSSLROOTCERT"] == "/etc/reminders/postgres-ca/ca.crt", where
        assert e["PGSSLCERT"] == "/etc/reminders/postgres-client/tls.crt", where
        assert e["PGSSLKEY"] == "/etc/reminders/postgres-client/tls.key", where
        assert e["KAFKA_SSL_CERTFILE"] == "/etc/reminders/kafka-client/tls.crt", where
        assert e["KAFKA_SSL_KEYFILE"] == "/etc/reminders/kafka-client/tls.key", where
        assert e["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel:4317", where
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        for name, secret in (
            ("kafka-ca", "kafka-ca"),
            ("kafka-client", "kafka-client"),
            ("postgres-ca", "pg-ca"),
            ("postgres-client", "pg-client"),
        ):
            assert mounts[name]["readOnly"] is True and mounts[name]["mountPath"].endswith(name)
            assert volumes[name]["secret"]["secretName"] == secret
            assert volumes[name]["secret"]["defaultMode"] == 0o440
        assert mounts["extra"]["mountPath"] == "/extra" and "emptyDir" in volumes["extra"]
    for job in ("migrate", "topics"):
        meta = one(objects, "Job", job)["spec"]["template"]["metadata"]
        assert meta["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert env(worker(objects))["WEB_READ_TOKEN"] == {
        "secretKeyRef": {
            "name": "rel-reminders-stream-secrets",
            "key": "WEB_READ_TOKEN",
            "optional": True,
        }
    }


def test_workers_spread_over_zones_and_prefer_different_nodes(helm: Path) -> None:
    pod = one(render(helm, []), "StatefulSet")["spec"]["template"]["spec"]
    selector = {
        "matchLabels": {
            "app.kubernetes.io/name": "reminders-stream",
            "app.kubernetes.io/instance": "rel",
            "app.kubernetes.io/component": "worker",
        }
    }
    [spread] = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway" and spread["labelSelector"] == selector
    [soft] = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert soft["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert soft["podAffinityTerm"]["labelSelector"] == selector
    own = one(render(helm, ["affinity.nodeAffinity.x=1"]), "StatefulSet")
    assert own["spec"]["template"]["spec"]["affinity"] == {"nodeAffinity": {"x": 1}}


def test_the_policy_linter_finds_nothing_but_the_justified_exceptions(
    helm: Path, tmp_path: Path
) -> None:
    """checkov (PyPI, pinned by devkit.checkov) over every value set: 0 failed checks; the ones
    skipped are values.yaml's lintExceptions, each with its reason."""
    from devkit.checkov import CheckovUnavailable, run_checkov

    exceptions = yaml.safe_load((CHART / "values.yaml").read_text())["lintExceptions"]
    assert exceptions and all(len(why) > 20 for why in exceptions.values())
    manifests = tmp_path / "rendered.yaml"
    manifests.write_text("\n---\n".join(render_text(helm, sets) for sets in VALUES.values()))
    try:
        out = run_checkov("-f", str(manifests), "--framework", "kubernetes", "-o", "json")
    except CheckovUnavailable as exc:
        pytest.fail(str(exc))
    report = json.loads(out.stdout)
    summary = report["summary"]
    failed = [
        f"{c['check_id']} {c['resource']}: {c['check_name']}"
        for c in report["results"]["failed_checks"]
    ]
    assert failed == [] and summary["parsing_errors"] == 0, out.stderr[-2000:]
    assert summary["passed"] > 100
    skipped = {c["check_id"] for c in report["results"]["skipped_checks"]}
    assert skipped == set(exceptions)
